#include "chief/checkpoint_cut.h"

#include <gtest/gtest.h>

#include <array>

namespace pst::chief {
namespace {

// A ps's SNAPSHOT answer holding, per worker, {position, min_step, max_step}.
proto::SaveResponse Ps(std::vector<std::array<int64_t, 3>> workers, int64_t version = 10,
                       bool holds_dense = true, bool pending = false) {
  proto::SaveResponse r;
  r.set_holds_dense(holds_dense);
  r.set_holds_any(true);
  r.set_max_version(version);
  r.set_sync_pending(pending);
  for (size_t w = 0; w < workers.size(); ++w) {
    if (workers[w][0] < 0 && workers[w][2] < 0) continue;  // nothing of it here
    proto::WorkerCut* c = r.add_cut();
    c->set_worker_index(static_cast<int>(w));
    c->set_position(workers[w][0]);
    c->set_min_step(workers[w][1]);
    c->set_max_step(workers[w][2]);
    c->set_rows_step(-1);
  }
  return r;
}

TEST(CheckpointCutTest, AgreeingSnapshots_GiveTheirPositions) {
  const std::vector<int64_t> fallback = {100, 200, 300};
  absl::StatusOr<std::vector<int64_t>> got = CutPositions(
      {Ps({{7, 6, 6}, {9, 8, 8}, {-1, -1, -1}}), Ps({{7, 6, 6}, {9, 8, 8}, {-1, -1, -1}})},
      /*sync=*/false, fallback);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<int64_t>{7, 9, 300})) << "worker 2 pushed nothing: its fallback";
}

TEST(CheckpointCutTest, AStepOnOnePsOnly_IsAborted) {
  absl::StatusOr<std::vector<int64_t>> got =
      CutPositions({Ps({{8, 7, 7}}), Ps({{7, 6, 6}})}, false, {0});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
  EXPECT_NE(got.status().message().find("worker 0 is at step 6"), std::string::npos)
      << got.status();
  // The worker's first step, on one ps only.
  got = CutPositions({Ps({{1, 0, 0}}), Ps({{-1, -1, -1}})}, false, {0});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
  // Best effort: the lowest position, so no batch is skipped.
  EXPECT_EQ(LowestPositions({Ps({{8, 7, 7}}), Ps({{7, 6, 6}})}, {0}),
            (std::vector<int64_t>{7}));
}

TEST(CheckpointCutTest, HalfAStepOnOnePs_IsAborted) {
  // Two parts of worker 0's step 5 sent, one held.
  absl::StatusOr<std::vector<int64_t>> got =
      CutPositions({Ps({{6, 4, 5}}), Ps({{6, 5, 5}})}, false, {0});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
  EXPECT_NE(got.status().message().find("part of step 5"), std::string::npos) << got.status();
}

TEST(CheckpointCutTest, Sync_PendingGradientsOrDifferentVersions_AreAborted) {
  EXPECT_EQ(CutPositions({Ps({{3, -1, -1}}, 3, true, /*pending=*/true), Ps({{3, -1, -1}}, 3)},
                         /*sync=*/true, {0})
                .status()
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(CutPositions({Ps({{3, -1, -1}}, 4), Ps({{3, -1, -1}}, 3)}, true, {0}).status().code(),
            absl::StatusCode::kAborted);
  absl::StatusOr<std::vector<int64_t>> got =
      CutPositions({Ps({{3, -1, -1}}, 3), Ps({{3, -1, -1}}, 3)}, true, {0});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<int64_t>{3});
}

TEST(CheckpointCutTest, APsWithoutDenseVariables_IsNotCompared) {
  absl::StatusOr<std::vector<int64_t>> got = CutPositions(
      {Ps({{5, 4, 4}}), Ps({{-1, -1, -1}}, 0, /*holds_dense=*/false)}, false, {0});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<int64_t>{5});
}

// Sync with tables: a ps holding only hash partitions moves one version per
// step too; rows summed there and not applied, or a version apart from the
// others', is part of a step.
TEST(CheckpointCutTest, Sync_APsOfTablesOnly_PendingOrAtAnotherVersion_IsAborted) {
  const proto::SaveResponse dense = Ps({{5, 4, 4}}, /*version=*/5);
  EXPECT_TRUE(
      CutPositions({dense, Ps({{-1, -1, -1}}, 5, /*holds_dense=*/false)}, /*sync=*/true, {0})
          .ok());
  EXPECT_EQ(CutPositions({dense, Ps({{-1, -1, -1}}, 5, false, /*pending=*/true)}, true, {0})
                .status()
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(CutPositions({dense, Ps({{-1, -1, -1}}, 6, false)}, true, {0}).status().code(),
            absl::StatusCode::kAborted);
  proto::SaveResponse empty = Ps({{-1, -1, -1}}, 0, false);
  empty.set_holds_any(false);
  EXPECT_TRUE(CutPositions({dense, empty}, true, {0}).ok()) << "a ps holding nothing has no step";
}

TEST(CheckpointCutTest, AWorkerOutsideTheJob_IsInvalidArgument) {
  EXPECT_EQ(CutPositions({Ps({{5, 4, 4}, {1, 0, 0}})}, false, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::chief
