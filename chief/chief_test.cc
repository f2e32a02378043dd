// The chief's pure logic; the job itself is tested end to end in tests/.
#include "chief/chief.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pst::chief
