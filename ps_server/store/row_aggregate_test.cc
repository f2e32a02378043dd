#include "ps_server/store/row_aggregate.h"

#include <gtest/gtest.h>

#include <vector>

namespace pst::ps {
namespace {

using Add = RowAggregate::Add;

TEST(RowAggregateTest, TakeMean_SumsPerIdAndDividesByThePushes_WhateverIdsEachHeld) {
  RowAggregate agg(/*dim=*/2);
  const std::vector<int64_t> a_ids = {7, 3};
  const std::vector<float> a = {1, 2, 10, 20};
  const std::vector<int64_t> b_ids = {3, 9};
  const std::vector<float> b = {4, 6, 100, 200};
  EXPECT_EQ(agg.AddPush(/*version=*/5, /*step=*/5, /*worker=*/0, a_ids, a, {}), Add::kAdded);
  EXPECT_FALSE(agg.Ready(2));
  EXPECT_TRUE(agg.pending());
  EXPECT_EQ(agg.AddPush(5, 5, 1, b_ids, b, {}), Add::kAdded);
  ASSERT_TRUE(agg.Ready(2));
  const RowAggregate::Mean mean = agg.TakeMean();
  EXPECT_EQ(mean.pushes, 2);
  EXPECT_EQ(mean.ids, (std::vector<int64_t>{3, 7, 9}));
  // Id 3 had both pushes, ids 7 and 9 one each: all divided by 2.
  EXPECT_EQ(mean.grad, (std::vector<float>{7, 13, 0.5f, 1, 50, 100}));
  EXPECT_FALSE(agg.pending());
  EXPECT_FALSE(agg.Ready(1));
}

TEST(RowAggregateTest, AddPush_StaleDuplicateAndAhead_AddNothing) {
  RowAggregate agg(1);
  const std::vector<int64_t> ids = {1};
  const std::vector<float> g = {4};
  EXPECT_EQ(agg.AddPush(3, /*step=*/2, 0, ids, g, {}), Add::kStale);
  EXPECT_EQ(agg.AddPush(3, /*step=*/4, 0, ids, g, {}), Add::kAhead);
  EXPECT_FALSE(agg.pending());
  EXPECT_EQ(agg.AddPush(3, 3, 0, ids, g, {}), Add::kAdded);
  EXPECT_EQ(agg.AddPush(3, 3, 0, ids, g, {}), Add::kDuplicate) << "a retry counts once";
  EXPECT_EQ(agg.contributors(), (std::vector<int32_t>{0}));
  const RowAggregate::Mean mean = agg.TakeMean();
  EXPECT_EQ(mean.pushes, 1);
  EXPECT_EQ(mean.grad, (std::vector<float>{4}));
}

TEST(RowAggregateTest, QuorumBelowTheWorkers_ReadyAtTheQuorum_LaterPushIsForTheNextStep) {
  RowAggregate agg(1);
  const std::vector<int64_t> ids = {2};
  EXPECT_EQ(agg.AddPush(0, 0, /*worker=*/1, ids, std::vector<float>{6}, {}), Add::kAdded);
  ASSERT_TRUE(agg.Ready(/*quorum=*/1)) << "a backup worker's push is not waited for";
  EXPECT_EQ(agg.TakeMean().grad, (std::vector<float>{6}));
  // The caller applied it: the variable is at version 1; worker 0's late
  // push for step 0 is stale.
  EXPECT_EQ(agg.AddPush(1, 0, 0, ids, std::vector<float>{8}, {}), Add::kStale);
  EXPECT_FALSE(agg.pending());
}

TEST(RowAggregateTest, SkippedRows_AreLeftOut_ThePushStillCounts) {
  RowAggregate agg(1);
  const std::vector<int64_t> ids = {1, 2};
  EXPECT_EQ(agg.AddPush(0, 0, 0, ids, std::vector<float>{2, 4}, {false, true}), Add::kAdded);
  EXPECT_EQ(agg.AddPush(0, 0, 1, std::vector<int64_t>{}, std::vector<float>{}, {}), Add::kAdded);
  const RowAggregate::Mean mean = agg.TakeMean();
  EXPECT_EQ(mean.pushes, 2) << "an empty push counts in the divisor";
  EXPECT_EQ(mean.ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(mean.grad, (std::vector<float>{1}));
}

TEST(RowAggregateTest, ExportThenLoad_GoesOnTheSame_BadStateRefused) {
  RowAggregate agg(2), copy(2);
  ASSERT_EQ(agg.AddPush(0, 0, 1, std::vector<int64_t>{8, 3}, std::vector<float>{1, 2, 3, 4}, {}),
            Add::kAdded);
  ASSERT_TRUE(copy.Load(agg.Export()).ok());
  EXPECT_EQ(copy.AddPush(0, 0, 1, std::vector<int64_t>{3}, std::vector<float>{5, 5}, {}),
            Add::kDuplicate);
  for (RowAggregate* a : {&agg, &copy}) {
    ASSERT_EQ(a->AddPush(0, 0, 0, std::vector<int64_t>{3}, std::vector<float>{1, 0}, {}),
              Add::kAdded);
  }
  const RowAggregate::Mean want = agg.TakeMean(), got = copy.TakeMean();
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.grad, want.grad);
  EXPECT_EQ(got.pushes, 2);
  RowAggregate bad(2);
  EXPECT_FALSE(bad.Load({{1}, {1, 2, 3}, {0}}).ok());
  EXPECT_FALSE(bad.Load({{1, 1}, {1, 2, 3, 4}, {0}}).ok());
  EXPECT_FALSE(bad.Load({{1}, {1, 2}, {0, 0}}).ok());
}

}  // namespace
}  // namespace pst::ps
