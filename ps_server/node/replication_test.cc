// Primary-backup replication of a shard (replication/replica_source.h,
// replication/backup_copies.h, PsNode's replicated calls), with two PsNodes
// in this process joined by a link that delivers forwards out of order: the
// backup must end equal to the primary bit for bit, a caller must be
// answered only once the backup holds its change, and a lost backup must
// not stop training.
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ps_server/node/ps_node.h"
#include "ps_server/node/replication_test_util.h"
#include "ps_server/replication/backup_copies.h"
#include "ps_server/replication/replica_source.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using namespace testing_util;  // NOLINT: the helpers of every replication test

// ps 0 (the primary of shard 0) and ps 1 (its backup), joined by a
// HeldLink. The link is made when ps 0 is first created with copies.
class ReplicationTest : public testing::Test {
 protected:
  ReplicationTest() {
    PsNode::Options backup_options;
    backup_options.ps_index = 1;
    backup_options.incarnation = 2;
    backup_ = std::make_unique<PsNode>(&backup_store_, backup_options);
    PsNode::Options options;
    options.ps_index = 0;
    options.incarnation = 1;
    options.link_to = [this](int index) -> std::unique_ptr<ReplicaLink> {
      EXPECT_EQ(index, 1);
      auto link = std::make_unique<HeldLink>(
          [this](std::shared_ptr<const proto::ReplicateRequest> r, Done d) {
            backup_->Replicate(std::move(r), std::move(d));
          });
      link_ = link.get();
      return link;
    };
    primary_ = std::make_unique<PsNode>(&primary_store_, options);
  }

  proto::CreateVariablesRequest CreateRequest(proto::SyncMode mode, int workers) {
    proto::CreateVariablesRequest request;
    *request.add_variables() = Dense("w", {16, 8});
    *request.add_variables() = Dense("b", {8});
    *request.add_variables() = Hash("emb", 4, /*admit_after=*/2);
    *request.mutable_optimizer() = Adam();
    request.mutable_sync()->set_mode(mode);
    request.mutable_sync()->set_num_workers(workers);
    request.mutable_copies()->set_primary(0);
    request.mutable_copies()->set_backup(1);
    return request;
  }

  absl::Status Create(const proto::CreateVariablesRequest& request) {
    proto::CreateVariablesResponse response;
    return Await([&](Done d) { primary_->CreateVariables(&request, &response, std::move(d)); });
  }

  // With `eviction` (and `capacity`), the hash table is bounded: the
  // backup must evict the very rows the primary does.
  void MixedChanges(proto::SyncMode mode, const std::string& eviction = "", int64_t capacity = 0);

  // The primary's and the backup's replica states (digests included).
  std::pair<proto::ReplicaState, proto::ReplicaState> States() {
    proto::HealthRequest request;
    request.set_digest(true);
    proto::HealthResponse primary, backup;
    primary_->Health(request, &primary);
    backup_->Health(request, &backup);
    EXPECT_EQ(primary.replicas_size(), 1);
    EXPECT_EQ(backup.replicas_size(), 1);
    if (primary.replicas_size() != 1 || backup.replicas_size() != 1) return {};
    return {primary.replicas(0), backup.replicas(0)};
  }

  VariableStore primary_store_, backup_store_;
  std::unique_ptr<PsNode> backup_;
  std::unique_ptr<PsNode> primary_;
  HeldLink* link_ = nullptr;
};

// Pushes of several workers at once, dense and by rows, pulls that make
// hash rows, a membership change, all forwarded while a thread delivers
// them in random order.
void ReplicationTest::MixedChanges(proto::SyncMode mode, const std::string& eviction,
                                   int64_t capacity) {
  constexpr int kWorkers = 3, kSteps = 40;
  proto::CreateVariablesRequest create = CreateRequest(mode, kWorkers);
  create.mutable_variables(2)->set_eviction(eviction);
  create.mutable_variables(2)->set_capacity(capacity);
  create.mutable_sync()->set_staleness(2);
  ASSERT_TRUE(Create(create).ok());
  ASSERT_NE(link_, nullptr);
  link_->Shuffle(/*seed=*/5);
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(w + 1);
      for (int step = 1; step <= kSteps; ++step) {
        const proto::PushRequest dense = DensePush(w, step, rng);
        proto::PushPullRequest pushpull;
        *pushpull.mutable_push() = dense;
        proto::PullResponse answer;
        if (step % 2 == 0) {
          if (!Await([&](Done d) {
                 primary_->PushPull(&pushpull, nullptr, &answer, std::move(d));
               }).ok()) {
            ++failures;
          }
        } else {
          proto::PushResponse pushed;
          if (!Await([&](Done d) {
                 primary_->Push(&dense, nullptr, &pushed, std::move(d));
               }).ok()) {
            ++failures;
          }
        }
        const proto::PushRowsRequest rows = RowPush(w, step, rng);
        proto::PullRowsRequest pull;
        *pull.add_rows() = rows.rows(0);
        proto::PullRowsResponse pulled;
        proto::PushRowsResponse pushed_rows;
        if (!Await([&](Done d) { primary_->PullRows(&pull, &pulled, std::move(d)); }).ok() ||
            !Await([&](Done d) { primary_->PushRows(&rows, &pushed_rows, std::move(d)); }).ok()) {
          ++failures;
        }
        if (w == 0 && step == kSteps / 2) {
          proto::MembershipRequest membership;
          membership.add_active_workers(0);
          membership.add_active_workers(1);
          membership.add_active_workers(2);
          membership.set_replicas_to_aggregate(kWorkers);
          proto::MembershipResponse unused;
          if (!Await([&](Done d) {
                 primary_->SetMembership(&membership, &unused, std::move(d));
               }).ok()) {
            ++failures;
          }
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  link_->StopShuffling();
  EXPECT_EQ(failures.load(), 0);
  // Every forward was answered before its caller was: nothing is pending.
  EXPECT_EQ(link_->pending(), 0);
  const auto [primary, backup] = States();
  EXPECT_TRUE(primary.backup_in_sync());
  EXPECT_EQ(primary.backup_ps(), 1);
  // A create, 2 dense pushes + 1 row push + 1 row pull per worker step, one
  // membership.
  EXPECT_EQ(primary.seq(), 1 + kWorkers * kSteps * 3 + 1);
  EXPECT_EQ(primary.acked(), primary.seq());
  EXPECT_EQ(backup.seq(), primary.seq());
  EXPECT_NE(primary.digest(), 0u);
  EXPECT_EQ(backup.digest(), primary.digest());
  EXPECT_GT(primary_store_.GetStats().hash_rows, 0);
  if (eviction.empty()) return;
  // The equal digests above say the backup holds the same rows: the
  // primary's table did evict.
  EXPECT_GT(primary_store_.GetStats().AllTables().evictions, 0);
  if (capacity > 0) {
    EXPECT_LE(primary_store_.GetStats().hash_rows, capacity);
  }
}

TEST_F(ReplicationTest, AsyncBackupEqualsPrimaryAfterConcurrentChangesDeliveredOutOfOrder) {
  MixedChanges(proto::ASYNC);
}

// 41 ids in a table of 10 rows: the backup, applying the same changes in
// the same order, evicts the rows its primary evicted, by each policy.
TEST_F(ReplicationTest, BoundedTableLru_BackupEvictsAsThePrimary) {
  MixedChanges(proto::ASYNC, "lru", 10);
}

TEST_F(ReplicationTest, BoundedTableLfu_BackupEvictsAsThePrimary) {
  MixedChanges(proto::ASYNC, "lfu:5", 10);
}

TEST_F(ReplicationTest, BoundedTableTtl_BackupExpiresAsThePrimary) {
  MixedChanges(proto::ASYNC, "ttl:3", 0);
}

TEST_F(ReplicationTest, SspBackupEqualsPrimaryAfterConcurrentChangesDeliveredOutOfOrder) {
  MixedChanges(proto::SSP);
}

TEST_F(ReplicationTest, SyncStepsAggregateTheSameOnTheBackup) {
  constexpr int kWorkers = 2, kSteps = 15;
  ASSERT_TRUE(Create(CreateRequest(proto::SYNC, kWorkers)).ok());
  link_->Shuffle(/*seed=*/9);
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(w + 11);
      for (int step = 0; step < kSteps; ++step) {
        proto::PushPullRequest pushpull;
        *pushpull.mutable_push() = DensePush(w, step, rng);
        pushpull.mutable_push()->set_base_version(step);
        proto::PullResponse answer;
        if (!Await([&](Done d) {
               primary_->PushPull(&pushpull, nullptr, &answer, std::move(d));
             }).ok()) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  link_->StopShuffling();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(primary_store_.GetStats().max_version, kSteps);
  const auto [primary, backup] = States();
  EXPECT_EQ(backup.seq(), primary.seq());
  EXPECT_EQ(backup.digest(), primary.digest());
  EXPECT_EQ(backup_store_.GetStats().max_version, 0);  // the copy is not ps 1's own store
}

TEST_F(ReplicationTest, CallerIsAnsweredOnlyOnceTheBackupHoldsTheChange) {
  ASSERT_TRUE(Create(CreateRequest(proto::ASYNC, 1)).ok());
  link_->Hold(true);
  std::mt19937 rng(3);
  const proto::PushRequest push = DensePush(0, 1, rng);
  proto::PushResponse first, repeat;
  std::atomic<bool> first_done{false}, repeat_done{false};
  primary_->Push(&push, nullptr, &first, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    first_done = true;
  });
  // Applied here, held on the way to the backup: not answered yet, and a
  // retry of it (recognized as a repeat) waits for the original too.
  EXPECT_FALSE(first_done.load());
  primary_->Push(&push, nullptr, &repeat, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    repeat_done = true;
  });
  EXPECT_FALSE(repeat_done.load());
  EXPECT_TRUE(repeat.duplicate());
  EXPECT_EQ(link_->pending(), 1);  // the repeat is not forwarded
  link_->DeliverAll();
  EXPECT_TRUE(first_done.load());
  EXPECT_TRUE(repeat_done.load());
  const auto [primary, backup] = States();
  EXPECT_EQ(backup.digest(), primary.digest());
}

// The backup dies with a push in flight. The chief may have seen it in
// sync and may promote it, should ps 0 be lost too: so the push, and every
// change after it, is held (applied here) until the chief drops the backup
// (or has the shard sent to it whole again: resync_test.cc).
TEST_F(ReplicationTest, LostBackupHoldsCallersUntilTheChiefDropsIt) {
  ASSERT_TRUE(Create(CreateRequest(proto::ASYNC, 1)).ok());
  link_->Hold(true);
  std::mt19937 rng(4);
  const proto::PushRequest first = DensePush(0, 1, rng);
  const proto::PushRequest second = DensePush(0, 2, rng);
  proto::PushResponse response, response2;
  std::atomic<int> answered{0};
  primary_->Push(&first, nullptr, &response, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    ++answered;
  });
  link_->Fail();  // the backup dies with the push in flight
  primary_->Push(&second, nullptr, &response2, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    ++answered;
  });
  EXPECT_EQ(answered.load(), 0);
  proto::HealthResponse health;
  primary_->Health(proto::HealthRequest(), &health);
  ASSERT_EQ(health.replicas_size(), 1);
  EXPECT_FALSE(health.replicas(0).backup_in_sync());
  EXPECT_FALSE(health.replicas(0).resyncing());
  EXPECT_EQ(health.replicas(0).seq(), 2);  // nothing sequenced once out of sync
  EXPECT_EQ(primary_store_.GetStats().pushes_applied, 2);

  // The chief's word: shard 0 goes on without a backup.
  proto::RolesRequest roles;
  roles.set_version(1);
  roles.add_shards()->set_primary(0);
  roles.mutable_shards(0)->set_backup(-1);
  proto::RolesResponse taken;
  ASSERT_TRUE(Await([&](Done d) { primary_->SetRoles(&roles, &taken, std::move(d)); }).ok());
  EXPECT_EQ(answered.load(), 2);
  const proto::PushRequest third = DensePush(0, 3, rng);
  EXPECT_TRUE(
      Await([&](Done d) { primary_->Push(&third, nullptr, &response, std::move(d)); }).ok());
  EXPECT_EQ(primary_store_.GetStats().pushes_applied, 3);
}

TEST_F(ReplicationTest, RefusedCreateLeavesNothingToForward) {
  proto::CreateVariablesRequest bad = CreateRequest(proto::ASYNC, 1);
  bad.mutable_optimizer()->set_name("nonsense");
  EXPECT_EQ(Create(bad).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_NE(link_, nullptr);
  EXPECT_EQ(link_->sent(), 0);
  proto::CreateVariablesRequest self = CreateRequest(proto::ASYNC, 1);
  self.mutable_copies()->set_backup(0);
  EXPECT_EQ(Create(self).code(), absl::StatusCode::kInvalidArgument);
}

// Before a restore of every copy the chief has each primary forward afresh
// (restart_backup): a new stream whose create starts the backup's copy
// again, ready for the restore to fill both alike.
TEST_F(ReplicationTest, RestartedStreamStartsTheBackupCopyAfresh) {
  ASSERT_TRUE(Create(CreateRequest(proto::ASYNC, 1)).ok());
  std::mt19937 rng(8);
  const proto::PushRequest push = DensePush(0, 1, rng);
  proto::PushResponse response;
  ASSERT_TRUE(Await([&](Done d) { primary_->Push(&push, nullptr, &response, std::move(d)); }).ok());
  EXPECT_EQ(States().second.seq(), 2);
  HeldLink* first = link_;
  proto::CreateVariablesRequest again = CreateRequest(proto::ASYNC, 1);
  again.set_restart_backup(true);
  ASSERT_TRUE(Create(again).ok());
  EXPECT_NE(link_, first);  // a new link, a new stream
  const auto [primary, backup] = States();
  EXPECT_TRUE(primary.backup_in_sync());
  EXPECT_EQ(primary.seq(), 1);
  EXPECT_EQ(backup.seq(), 1);
  EXPECT_NE(backup.digest(), primary.digest())
      << "the fresh copy lacks the push: a restore follows";
}

// ps 0 dies with a push applied there but not yet on its backup; the chief
// promotes the backup on ps 1. The worker sends both its pushes again to
// ps 1: the one the backup holds is recognized as a repeat, the other is
// applied, and the promoted copy ends where the lost primary was.
TEST_F(ReplicationTest, PromotedBackupServesTheShard_AndARetryAcrossTheFailoverAppliesOnce) {
  ASSERT_TRUE(Create(CreateRequest(proto::ASYNC, 1)).ok());
  std::mt19937 rng(6);
  const proto::PushRequest first = DensePush(0, 1, rng);
  const proto::PushRequest second = DensePush(0, 2, rng);
  proto::PushResponse response;
  ASSERT_TRUE(
      Await([&](Done d) { primary_->Push(&first, nullptr, &response, std::move(d)); }).ok());
  link_->Hold(true);
  bool second_answered = false;
  primary_->Push(&second, nullptr, &response, [&](absl::Status) { second_answered = true; });
  EXPECT_FALSE(second_answered);  // held on its way to the backup...
  proto::HealthRequest digest;
  digest.set_digest(true);
  proto::HealthResponse before;
  primary_->Health(digest, &before);
  link_->Fail();  // ...when ps 0 dies: the backup never gets it

  // A promotion needs the copy: ps 1 holds none of shard 5.
  proto::RolesRequest roles;
  roles.set_version(1);
  roles.add_shards()->set_primary(1);
  roles.mutable_shards(0)->set_backup(-1);
  roles.add_shards()->set_primary(1);
  roles.mutable_shards(1)->set_backup(-1);
  proto::RolesRequest bad = roles;
  for (int g = 2; g <= 5; ++g) bad.add_shards()->set_primary(1);
  proto::RolesResponse promoted;
  EXPECT_EQ(Await([&](Done d) { backup_->SetRoles(&bad, &promoted, std::move(d)); }).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Await([&](Done d) { backup_->SetRoles(&roles, &promoted, std::move(d)); }).ok());
  EXPECT_EQ(std::vector<int>(promoted.primaries().begin(), promoted.primaries().end()),
            (std::vector<int>{0, 1}));
  // An older layout is refused.
  proto::RolesRequest old = roles;
  old.set_version(0);
  EXPECT_EQ(Await([&](Done d) { backup_->SetRoles(&old, &promoted, std::move(d)); }).code(),
            absl::StatusCode::kFailedPrecondition);

  // The worker's retries, now to ps 1.
  proto::PushResponse again;
  ASSERT_TRUE(Await([&](Done d) { backup_->Push(&first, nullptr, &again, std::move(d)); }).ok());
  EXPECT_TRUE(again.duplicate());
  ASSERT_TRUE(Await([&](Done d) { backup_->Push(&second, nullptr, &again, std::move(d)); }).ok());
  EXPECT_FALSE(again.duplicate());
  proto::HealthResponse after;
  backup_->Health(digest, &after);
  const proto::ReplicaState* shard0 = nullptr;
  for (const proto::ReplicaState& r : after.replicas()) {
    if (r.shard() == 0) shard0 = &r;
  }
  ASSERT_NE(shard0, nullptr) << after.DebugString();
  EXPECT_TRUE(shard0->primary());
  EXPECT_GT(shard0->first_change_unix_ms(), 0);
  ASSERT_EQ(before.replicas_size(), 1);
  EXPECT_EQ(shard0->digest(), before.replicas(0).digest()) << "the lost primary's state, exactly";
  EXPECT_EQ(backup_->StoreFor("w")->GetStats().pushes_applied, 2);
  EXPECT_EQ(backup_->StoreFor("w").get() == &backup_store_, false);
  EXPECT_EQ(after.max_version(), 2);
}

// The chief took ps 0 for lost (it hung) and promoted its backup, but ps 0
// runs on and a worker that has not heard reaches it: its forward is
// refused, and the push is answered Unavailable (so the worker sends it to
// the new primary) instead of being taken by a copy nobody reads.
TEST_F(ReplicationTest, OldPrimaryIsFencedOffOnceItsBackupIsPromoted) {
  ASSERT_TRUE(Create(CreateRequest(proto::ASYNC, 1)).ok());
  proto::RolesRequest roles;
  roles.set_version(1);
  for (int g = 0; g < 2; ++g) {
    roles.add_shards()->set_primary(1);
    roles.mutable_shards(g)->set_backup(-1);
  }
  proto::RolesResponse promoted;
  ASSERT_TRUE(Await([&](Done d) { backup_->SetRoles(&roles, &promoted, std::move(d)); }).ok());
  std::mt19937 rng(9);
  const proto::PushRequest push = DensePush(0, 1, rng);
  proto::PushResponse response;
  absl::Status status =
      Await([&](Done d) { primary_->Push(&push, nullptr, &response, std::move(d)); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  const proto::PushRequest next = DensePush(0, 2, rng);
  status = Await([&](Done d) { primary_->Push(&next, nullptr, &response, std::move(d)); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  // The new primary takes both, once each.
  ASSERT_TRUE(Await([&](Done d) { backup_->Push(&push, nullptr, &response, std::move(d)); }).ok());
  ASSERT_TRUE(Await([&](Done d) { backup_->Push(&next, nullptr, &response, std::move(d)); }).ok());
  EXPECT_EQ(backup_->StoreFor("w")->GetStats().pushes_applied, 2);
}

// The backup side alone.
TEST(BackupCopiesTest, TakesChangesInTurnAndRestartsWithANewPrimary) {
  BackupCopies copies{VariableStore::Options()};
  auto change = [](uint64_t source, int64_t seq, int64_t stream = 1) {
    auto r = std::make_shared<proto::ReplicateRequest>();
    r->set_shard(4);
    r->set_source_incarnation(source);
    r->set_stream(stream);
    r->set_seq(seq);
    if (seq == 1) {
      *r->mutable_create()->add_variables() = Dense("v", {2});
      r->mutable_create()->mutable_optimizer()->set_name("sgd");
      r->mutable_create()->mutable_optimizer()->set_learning_rate(1);
      r->mutable_create()->mutable_sync()->set_num_workers(1);
    } else {
      r->mutable_membership()->add_active_workers(0);
      r->mutable_membership()->set_replicas_to_aggregate(1);
    }
    return r;
  };
  auto apply = [&](std::shared_ptr<proto::ReplicateRequest> r) {
    auto status = std::make_shared<absl::Status>(absl::UnknownError("not answered"));
    copies.Apply(std::move(r), [status](absl::Status s) { *status = std::move(s); });
    return status;
  };
  // A change from a primary it holds no copy of.
  EXPECT_EQ(apply(change(7, 3))->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(apply(change(7, 1))->ok());
  // 3 before 2: waits (as does its resend), then both are taken in order.
  auto third = apply(change(7, 3));
  auto resent = apply(change(7, 3));
  EXPECT_EQ(third->code(), absl::StatusCode::kUnknown);
  EXPECT_TRUE(apply(change(7, 2))->ok());
  EXPECT_TRUE(third->ok());
  EXPECT_TRUE(resent->ok());
  EXPECT_TRUE(apply(change(7, 2))->ok());  // a resend
  google::protobuf::RepeatedPtrField<proto::ReplicaState> states;
  copies.States(false, &states);
  ASSERT_EQ(states.size(), 1);
  EXPECT_EQ(states[0].shard(), 4);
  EXPECT_EQ(states[0].seq(), 3);
  // The primary restarted: its create starts the copy again.
  EXPECT_TRUE(apply(change(8, 1))->ok());
  states.Clear();
  copies.States(false, &states);
  EXPECT_EQ(states[0].seq(), 1);
  // A late change of the old primary is refused.
  EXPECT_EQ(apply(change(7, 4))->code(), absl::StatusCode::kFailedPrecondition);
  // The same primary forwarding afresh (a new stream, before a restore):
  // its create starts the copy again, and the old stream's changes are
  // refused from then on.
  EXPECT_TRUE(apply(change(8, 2))->ok());
  EXPECT_TRUE(apply(change(8, 1, /*stream=*/2))->ok());
  EXPECT_EQ(apply(change(8, 3))->code(), absl::StatusCode::kFailedPrecondition);
  states.Clear();
  copies.States(false, &states);
  EXPECT_EQ(states[0].seq(), 1);
}

}  // namespace
}  // namespace pst::ps
