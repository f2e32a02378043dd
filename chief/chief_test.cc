// The chief's pure logic; the job itself is tested end to end in tests/.
#include "chief/chief.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/checkpointing.h"

namespace pst::chief {
namespace {

proto::TrainingConfig Training(int batch, int epochs, proto::SyncMode mode, int64_t max_steps = 0) {
  proto::TrainingConfig training;
  training.set_batch_size(batch);
  training.set_epochs(epochs);
  training.mutable_sync()->set_mode(mode);
  training.set_max_steps(max_steps);
  return training;
}

TEST(ExpectedFinalStepTest, AsyncCountsEveryWorkersBatches) {
  // Fashion-MNIST over 2 workers: 30000 examples each, 469 batches of 64 an
  // epoch (the last one short).
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::ASYNC), 2, 60000), 2 * 469 * 3);
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::SSP), 2, 60000), 2 * 469 * 3);
}

TEST(ExpectedFinalStepTest, SyncCountsRoundsOfTheWorkerWithTheMostBatches) {
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::SYNC), 2, 60000), 469 * 3);
  // 7 examples over 3 workers: shards of 3, 2 and 2 (i % 3), so batches of
  // 2 make 2, 1 and 1 batches.
  EXPECT_EQ(ExpectedFinalStep(Training(2, 1, proto::SYNC), 3, 7), 2);
  EXPECT_EQ(ExpectedFinalStep(Training(2, 1, proto::ASYNC), 3, 7), 4);
}

TEST(ExpectedFinalStepTest, MoreWorkersThanExamples_EmptyShardsAddNothing) {
  EXPECT_EQ(ExpectedFinalStep(Training(1, 1, proto::ASYNC), 5, 3), 3);
  EXPECT_EQ(ExpectedFinalStep(Training(1, 1, proto::SYNC), 5, 3), 1);
}

TEST(ExpectedFinalStepTest, MaxStepsBoundsIt_AndStandsAloneWhenTheDataIsUnknown) {
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::ASYNC, 1000), 2, 60000), 1000);
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::ASYNC, 99999), 2, 60000), 2814);
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::ASYNC, 500), 2, 0), 500);
}

TEST(ExpectedFinalStepTest, NothingKnown_IsZero) {
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::ASYNC), 2, 0), 0);
  EXPECT_EQ(ExpectedFinalStep(Training(0, 3, proto::ASYNC), 2, 60000), 0);
  EXPECT_EQ(ExpectedFinalStep(Training(64, 3, proto::ASYNC), 0, 60000), 0);
}

// A plan of the variables `shapes`, each whole or cut into two row
// partitions ("<name>/part_<p>", its whole shape in full_shape).
proto::PlacementPlan Plan(const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                          bool partitioned) {
  proto::PlacementPlan plan;
  for (const auto& [name, shape] : shapes) {
    for (int p = 0; p < (partitioned ? 2 : 1); ++p) {
      proto::VariableSpec* spec = plan.add_variables()->mutable_spec();
      spec->set_name(partitioned ? absl::StrCat(name, "/part_", p) : name);
      for (int64_t d : shape) spec->add_shape(d);
      if (partitioned) {
        spec->set_shape(0, shape[0] / 2);
        spec->set_variable(name);
        for (int64_t d : shape) spec->add_full_shape(d);
        spec->set_partition(p);
        spec->set_num_partitions(2);
      }
    }
  }
  return plan;
}

const std::vector<std::pair<std::string, std::vector<int64_t>>> kMlp = {
    {"dense_0/kernel", {784, 16}},
    {"dense_0/bias", {16}},
    {"dense_1/kernel", {16, 10}},
    {"dense_1/bias", {10}},
    {"dense_2/kernel", {10, 10}}};

TEST(CheckSameModelTest, SameVariablesPlacedAndPartitionedOtherwise_IsOk) {
  EXPECT_TRUE(
      CheckSameModel("/ckpt", "/ckpt/ckpt-000000000938", Plan(kMlp, false), Plan(kMlp, true)).ok());
}

TEST(CheckSameModelTest, AShapeDiffers_SaysSoNamingTheVariable) {
  auto wider = kMlp;
  wider[0].second = {784, 64};
  const absl::Status status =
      CheckSameModel("/ckpt", "/ckpt/ckpt-000000000938", Plan(kMlp, true), Plan(wider, false));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "/ckpt holds checkpoints of another model (ckpt-000000000938: its 'dense_0/kernel' "
            "has shape [784, 16], this job's [784, 64]): use another --checkpoint_dir or empty "
            "it");
}

TEST(CheckSameModelTest, OtherVariables_SaysSoListingBoth) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> cnn = {
      {"conv1.weight", {16, 1, 3, 3}}, {"conv1.bias", {16}}};
  const absl::Status status = CheckSameModel("/tmp/ckpt", "/tmp/ckpt/ckpt-000000000938",
                                             Plan(kMlp, true), Plan(cnn, false));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "/tmp/ckpt holds checkpoints of another model (ckpt-000000000938: its variables: "
            "dense_0/kernel, dense_0/bias, dense_1/kernel, dense_1/bias, ... (5 in all); this "
            "job's: conv1.weight, conv1.bias): use another --checkpoint_dir or empty it");
  // One more variable is another model too.
  auto more = kMlp;
  more.push_back({"dense_2/bias", {10}});
  EXPECT_EQ(CheckSameModel("/ckpt", "/ckpt/ckpt-1", Plan(kMlp, false), Plan(more, false)).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pst::chief
