#include "chief/replica_view.h"

#include "common/placement.h"
#include "gtest/gtest.h"

namespace pst::chief {
namespace {

proto::PlacementPlan Plan(int num_ps) {
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  EXPECT_TRUE(common::ReplicateShards(2, &plan).ok());
  return plan;
}

proto::ReplicaState Primary(int shard, int backup, bool in_sync, int64_t seq, uint64_t digest) {
  proto::ReplicaState r;
  r.set_shard(shard);
  r.set_primary(true);
  r.set_backup_ps(backup);
  r.set_backup_in_sync(in_sync);
  r.set_seq(seq);
  r.set_acked(seq);
  r.set_digest(digest);
  return r;
}

proto::ReplicaState Copy(int shard, int64_t seq, uint64_t digest) {
  proto::ReplicaState r;
  r.set_shard(shard);
  r.set_backup_in_sync(true);
  r.set_seq(seq);
  r.set_digest(digest);
  return r;
}

TEST(ReplicaViewTest, OneCopyIsNotShown) {
  proto::PlacementPlan plan;
  plan.set_num_ps(2);
  ReplicaView view(plan);
  EXPECT_FALSE(view.enabled());
  EXPECT_EQ(view.ProgressText(), "");
}

TEST(ReplicaViewTest, BackupsInSyncFromTheHealthOfBothCopies) {
  ReplicaView view(Plan(2));
  ASSERT_TRUE(view.enabled());
  EXPECT_EQ(view.ProgressText(), "backups 0/2 in sync");
  proto::HealthResponse ps0, ps1;
  *ps0.add_replicas() = Primary(0, 1, true, 10, 0);
  *ps0.add_replicas() = Copy(1, 7, 0);
  *ps1.add_replicas() = Primary(1, 0, true, 7, 0);
  view.Update(0, ps0);
  EXPECT_EQ(view.ProgressText(), "backups 0/2 in sync");  // shard 0's copy not heard yet
  *ps1.add_replicas() = Copy(0, 10, 0);
  view.Update(1, ps1);
  EXPECT_EQ(view.ProgressText(), "backups 2/2 in sync");
  // ps 1 restarted: it holds nothing, so neither its shard nor its copy is.
  view.Update(1, proto::HealthResponse());
  EXPECT_EQ(view.in_sync(), 0);
  // ps 0's forwards failed.
  view.Update(1, ps1);
  ps0.mutable_replicas(0)->set_backup_in_sync(false);
  view.Update(0, ps0);
  EXPECT_EQ(view.ProgressText(), "backups 1/2 in sync");
  const nlohmann::json json = view.ToJson();
  EXPECT_EQ(json["replicas"], 2);
  EXPECT_EQ(json["shards"][0]["in_sync"], false);
  EXPECT_EQ(json["shards"][1]["in_sync"], true);
  EXPECT_EQ(json["shards"][1]["primary"], 1);
  EXPECT_EQ(json["shards"][1]["backup"], 0);
}

TEST(ReplicaViewTest, DigestsCompareOnlyAtTheSameChange) {
  ReplicaView view(Plan(2));
  proto::HealthResponse ps0, ps1;
  *ps0.add_replicas() = Primary(0, 1, true, 10, 0xabc);
  *ps0.add_replicas() = Copy(1, 5, 0x111);
  *ps1.add_replicas() = Primary(1, 0, true, 6, 0x222);  // one change ahead of its copy
  *ps1.add_replicas() = Copy(0, 10, 0xabc);
  view.Update(0, ps0);
  view.Update(1, ps1);
  const std::vector<ReplicaView::Shard> shards = view.shards();
  EXPECT_TRUE(shards[0].checked);
  EXPECT_TRUE(shards[0].digests_match);
  EXPECT_FALSE(shards[1].checked);
  const nlohmann::json json = view.ToJson();
  EXPECT_EQ(json["shards"][0]["digests_match"], true);
  EXPECT_FALSE(json["shards"][1].contains("digests_match"));
  // A different digest at the same change: not equal.
  ps1.mutable_replicas(1)->set_digest(0xabd);
  view.Update(1, ps1);
  EXPECT_TRUE(view.shards()[0].checked);
  EXPECT_FALSE(view.shards()[0].digests_match);
}

}  // namespace
}  // namespace pst::chief
