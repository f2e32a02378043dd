// The chief's save when the ps' snapshots form no consistent cut, in one
// process (chief::SaveCheckpoint over the in-process control): a worker's
// step applied on one ps and not yet on the other. The save falls back to
// each worker's lowest position and marks its manifest inexact; once the
// step has reached every ps, a full save of the same step replaces it with
// an exact cut (the final save of a job whose last periodic save raced its
// workers' last pushes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/checkpointing.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "common/tensor_util.h"
#include "ps_server/in_process_control.h"
#include "tests/wide_deep_stores.h"

namespace pst::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kNumPs = 2;
constexpr uint64_t kIncarnation = 9;  // the Cluster's client's

// A push of worker 0's step `step` (its batch at data position `position`,
// so the position after it is one more) to ps `p` alone: a zero gradient for each dense variable it
// holds.
void PushToOnePs(Cluster& cluster, const proto::TrainingConfig& training,
                 const proto::PlacementPlan& plan, int p, int64_t step, int64_t position) {
  const std::vector<std::string> dense = DenseNames(*ModelVariables(training));
  proto::PushRequest request;
  request.set_worker_index(0);
  request.set_incarnation(kIncarnation);
  request.set_step(step);
  request.set_base_version(step);
  request.set_position(position);
  for (const auto& entry : plan.variables()) {
    const std::string& name =
        entry.spec().variable().empty() ? entry.spec().name() : entry.spec().variable();
    if (entry.ps_index() != p || std::find(dense.begin(), dense.end(), name) == dense.end()) {
      continue;
    }
    const common::Shape shape(entry.spec().shape().begin(), entry.spec().shape().end());
    std::vector<float> zeros(*common::NumElements(shape), 0.0f);
    request.add_names(entry.spec().name());
    common::PackFloats(zeros, shape, request.add_gradients());
  }
  ASSERT_GT(request.names_size(), 0) << "ps " << p << " holds no dense variable";
  proto::PushResponse response;
  const absl::Status pushed = cluster.transport->store(p)->Push(request, &response);
  ASSERT_TRUE(pushed.ok()) << pushed;
}

TEST(CheckpointCutSaveTest, StepOnOnePsOnly_SavesInexact_ThenTheExactSaveReplacesIt) {
  const std::string root = absl::StrCat(::testing::TempDir(), "/cut_save_", getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  const proto::TrainingConfig training = Training(kNumPs, proto::MOD, kBuckets);
  Cluster cluster(training, kNumPs, nullptr, root);
  chief::ChiefOptions options;
  options.checkpoint_dir = root;
  options.keep_checkpoints = 3;
  std::vector<chief::PsPeer> peers;
  for (int p = 0; p < kNumPs; ++p) {
    peers.push_back({absl::StrCat("ps ", p), ps::InProcessPs::IncarnationOf(p, 0), {}});
  }
  proto::ClusterState state;
  *state.mutable_plan() = *BuildPlan(training, kNumPs);
  *state.mutable_training() = training;
  state.set_num_workers(1);
  ps::InProcessPsControl control(cluster.ps);
  auto save = [&](int64_t chief_position) {
    return chief::SaveCheckpoint(control, peers, options, state, 0, {chief_position});
  };

  PushToOnePs(cluster, training, state.plan(), 0, 1, 3);
  PushToOnePs(cluster, training, state.plan(), 1, 1, 3);
  absl::StatusOr<chief::SaveFigures> first = save(4);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->exact);
  EXPECT_FALSE(common::ReadManifest(root + "/" + first->name)->inexact());

  // Step 2 (the batch at position 4) on ps 0 only: no cut in any snapshot.
  PushToOnePs(cluster, training, state.plan(), 0, 2, 4);
  absl::StatusOr<chief::SaveFigures> racing = save(5);
  ASSERT_TRUE(racing.ok()) << racing.status();
  EXPECT_FALSE(racing->exact);
  EXPECT_EQ(racing->cut_attempts, chief::kCutAttempts);
  EXPECT_EQ(racing->step, 2);  // the version ps 0 holds
  const std::string dir = root + "/" + racing->name;
  absl::StatusOr<proto::CheckpointManifest> inexact = common::ReadManifest(dir);
  ASSERT_TRUE(inexact.ok()) << inexact.status();
  EXPECT_TRUE(inexact->inexact());
  ASSERT_EQ(inexact->worker_positions_size(), 1);
  EXPECT_EQ(inexact->worker_positions(0), 4);  // its lowest: ps 1's

  // The step reaches ps 1: the same step, cut exactly, replaces it.
  PushToOnePs(cluster, training, state.plan(), 1, 2, 4);
  absl::StatusOr<chief::SaveFigures> exact = save(5);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_TRUE(exact->exact);
  EXPECT_EQ(exact->name, racing->name);
  EXPECT_GT(exact->bytes, 0);  // written, not found saved already
  absl::StatusOr<proto::CheckpointManifest> replaced = common::ReadManifest(dir);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_FALSE(replaced->inexact());
  EXPECT_EQ(replaced->global_step(), 2);
  ASSERT_EQ(replaced->worker_positions_size(), 1);
  EXPECT_EQ(replaced->worker_positions(0), 5);
  EXPECT_TRUE(common::InspectCheckpoint(dir).ok());
  // The inexact one is gone, not left aside.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    EXPECT_EQ(entry.path().filename().string().find(".inexact-"), std::string::npos)
        << entry.path();
    ++entries;
  }
  EXPECT_EQ(entries, 2);  // the first checkpoint and this one

  // An exact checkpoint is never replaced: saved already.
  absl::StatusOr<chief::SaveFigures> again = save(5);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->bytes, 0);
  fs::remove_all(root);
}

}  // namespace
}  // namespace pst::testing
