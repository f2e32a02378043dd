// Resyncs of replicated shards (ReplicaSource::Resync, BackupCopies, PsNode
// SetRoles with resync): a ps that comes back after a failover is sent the
// shards it should back up whole while training goes on, then takes every
// change as before; a copy being sent cannot be promoted; and a ps may be
// promoted back to serve its own shard from its copy. Two PsNodes in this
// process, each the primary of its own shard and the backup of the other's,
// with the chief's calls made by hand.
#include <unistd.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "ps_server/node/ps_node.h"
#include "ps_server/node/replication_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using namespace testing_util;  // NOLINT: the helpers of every replication test

class ResyncTest : public testing::Test {
 protected:
  ResyncTest() {
    Start(0);
    Start(1);
  }
  ~ResyncTest() override {
    for (auto& links : links_) {
      for (const auto& link : links) link->Fail();
    }
    for (int i = 0; i < 2; ++i) {
      nodes_[i].reset();
      stores_[i].reset();
      tiers_[i].reset();
      if (!tier_dirs_[i].empty()) std::filesystem::remove_all(tier_dirs_[i]);
    }
  }

  // From the next Start: each ps keeps the rows past a table's capacity in
  // a disk tier of its own.
  void UseDiskTiers() {
    for (int i = 0; i < 2; ++i) {
      tier_dirs_[i] = absl::StrCat(::testing::TempDir(), "/resync_test_tier_", getpid(), "_", i);
      std::filesystem::remove_all(tier_dirs_[i]);
      tiers_[i] = DiskTier::Open(tier_dirs_[i], {}).value();
    }
  }

  // ps `i` (re)starts: a new store and incarnation, holding nothing.
  void Start(int i) {
    for (const auto& link : links_[i]) link->Fail();  // its forwards in flight are lost
    links_[i].clear();
    nodes_[i].reset();
    // The smallest admission filter: the shard's state is then one part
    // (the default filter, 32 MiB, would take several).
    VariableStore::Options store_options;
    store_options.admission_filter_bytes = 8 << 10;
    store_options.disk_tier = tiers_[i];
    stores_[i] = std::make_unique<VariableStore>(store_options);
    PsNode::Options options;
    options.store_options = store_options;
    options.resync_part_bytes = resync_part_bytes_;
    options.ps_index = i;
    options.incarnation = static_cast<uint64_t>(++incarnations_);
    options.link_to = [this, i](int to) -> std::unique_ptr<ReplicaLink> {
      auto link = std::make_shared<HeldLink>(
          [this, to](std::shared_ptr<const proto::ReplicateRequest> r, Done d) {
            nodes_[to]->Replicate(std::move(r), std::move(d));
          });
      link->Hold(hold_new_links_);
      links_[i].push_back(link);
      return std::make_unique<SharedLink>(link);
    };
    nodes_[i] = std::make_unique<PsNode>(stores_[i].get(), options);
  }

  // Shard 0: a dense "w0" and a hash embedding with admission (or, with
  // `emb_capacity`, without, and bounded to that many rows, lru); shard 1:
  // a dense "w1". Each shard's backup is on the other ps.
  void CreateBoth(proto::SyncMode mode, int workers, int64_t emb_capacity = 0) {
    for (int i = 0; i < 2; ++i) {
      proto::CreateVariablesRequest request;
      if (i == 0) {
        *request.add_variables() = Dense("w0", {16, 8});
        proto::VariableSpec emb = Hash("emb0", 4, /*admit_after=*/emb_capacity > 0 ? 1 : 2);
        if (emb_capacity > 0) {
          emb.set_capacity(emb_capacity);
          emb.set_eviction("lru");
        }
        *request.add_variables() = emb;
      } else {
        *request.add_variables() = Dense("w1", {8, 4});
      }
      *request.mutable_optimizer() = Adam();
      request.mutable_sync()->set_mode(mode);
      request.mutable_sync()->set_num_workers(workers);
      request.mutable_copies()->set_primary(i);
      request.mutable_copies()->set_backup(1 - i);
      proto::CreateVariablesResponse response;
      ASSERT_TRUE(Await([&](Done d) {
                    nodes_[i]->CreateVariables(&request, &response, std::move(d));
                  }).ok());
    }
  }

  absl::Status Push(int ps, const proto::PushRequest& push, proto::PushResponse* response) {
    return Await([&](Done d) { nodes_[ps]->Push(&push, nullptr, response, std::move(d)); });
  }
  absl::Status PushShard0(int ps, int worker, int64_t step, std::mt19937& rng) {
    proto::PushResponse response;
    PST_RETURN_IF_ERROR(Push(ps, PushOf("w0", {16, 8}, worker, step, rng), &response));
    proto::PushRowsRequest rows = RowPush(worker, step, rng);
    rows.mutable_rows(0)->set_name("emb0/part_0");
    proto::PushRowsResponse pushed;
    return Await([&](Done d) { nodes_[ps]->PushRows(&rows, &pushed, std::move(d)); });
  }

  // The chief's SetRoles: shard g's primary and backup.
  absl::Status Roles(int ps, std::array<std::pair<int, int>, 2> shards, bool resync) {
    proto::RolesRequest roles;
    roles.set_version(++roles_version_);
    roles.set_resync(resync);
    for (const auto& [primary, backup] : shards) {
      proto::ShardCopies* copies = roles.add_shards();
      copies->set_primary(primary);
      copies->set_backup(backup);
    }
    proto::RolesResponse response;
    return Await([&](Done d) { nodes_[ps]->SetRoles(&roles, &response, std::move(d)); });
  }

  // ReplicaState of `shard` on ps `ps` as its primary (or its backup).
  proto::ReplicaState State(int ps, int shard, bool primary) {
    proto::HealthRequest request;
    request.set_digest(true);
    proto::HealthResponse health;
    nodes_[ps]->Health(request, &health);
    for (const proto::ReplicaState& r : health.replicas()) {
      if (r.shard() == shard && r.primary() == primary) return r;
    }
    ADD_FAILURE() << "ps " << ps << " holds no " << (primary ? "primary" : "backup") << " of shard "
                  << shard << ": " << health.DebugString();
    return proto::ReplicaState();
  }

  void ExpectBackupEqualsPrimary(int primary_ps, int shard, int backup_ps) {
    const proto::ReplicaState primary = State(primary_ps, shard, true);
    const proto::ReplicaState backup = State(backup_ps, shard, false);
    EXPECT_TRUE(primary.backup_in_sync()) << primary.DebugString();
    EXPECT_FALSE(primary.resyncing());
    EXPECT_TRUE(backup.backup_in_sync()) << backup.DebugString();
    EXPECT_EQ(backup.seq(), primary.seq());
    EXPECT_NE(primary.digest(), 0u);
    EXPECT_EQ(backup.digest(), primary.digest()) << "shard " << shard;
  }

  // ps 1 dies and comes back empty. The chief fails its shard over to ps 0
  // and drops the backups it held; then (MendBackups) names it the backup
  // of both shards again, and ps 0 sends them whole over held links.
  void LoseAndResyncPs1() {
    Start(1);
    ASSERT_TRUE(Roles(0, {{{0, -1}, {0, -1}}}, false).ok());
    hold_new_links_ = true;
    ASSERT_TRUE(Roles(1, {{{0, 1}, {0, 1}}}, true).ok());  // the new backup first
    ASSERT_TRUE(Roles(0, {{{0, 1}, {0, 1}}}, true).ok());
    hold_new_links_ = false;
  }

  // Declared first: they go after the stores that keep rows there.
  std::array<std::shared_ptr<DiskTier>, 2> tiers_;
  std::array<std::string, 2> tier_dirs_;
  int64_t resync_part_bytes_ = int64_t{4} << 20;
  std::array<std::unique_ptr<VariableStore>, 2> stores_;
  std::array<std::unique_ptr<PsNode>, 2> nodes_;
  // Every link each ps made, kept after its source lets go of it.
  std::array<std::vector<std::shared_ptr<HeldLink>>, 2> links_;
  int incarnations_ = 0;
  int64_t roles_version_ = 0;
  bool hold_new_links_ = false;
};

TEST_F(ResyncTest, PsThatCameBackIsSentItsShardsWholeWhileTrainingGoesOn) {
  CreateBoth(proto::ASYNC, 2);
  std::mt19937 rng(1);
  for (int step = 1; step <= 5; ++step) {
    ASSERT_TRUE(PushShard0(0, 0, step, rng).ok());
    proto::PushResponse response;
    ASSERT_TRUE(Push(1, PushOf("w1", {8, 4}, 1, step, rng), &response).ok());
  }
  LoseAndResyncPs1();
  // The link of the create, then one per shard sent: shard 1 (promoted
  // here), then shard 0.
  ASSERT_EQ(links_[0].size(), 3u);
  HeldLink* shard0_link = links_[0][2].get();
  // Part 0 alone is on its way: the rest of the stream waits until the
  // backup has taken it (it starts the copy).
  EXPECT_EQ(shard0_link->pending(), 1);

  // Training goes on while the copy is on its way: pushes are answered,
  // not held, and forwarded behind the state.
  ASSERT_TRUE(PushShard0(0, 0, 6, rng).ok());
  EXPECT_EQ(shard0_link->pending(), 1);
  const proto::ReplicaState sending = State(0, 0, true);
  EXPECT_TRUE(sending.resyncing());
  EXPECT_FALSE(sending.backup_in_sync());
  ASSERT_TRUE(shard0_link->Deliver(0));  // ps 1 starts its copy
  EXPECT_EQ(shard0_link->pending(), 1)
      << "the values; the pushes wait until the backup has taken the whole state";
  const proto::ReplicaState partial = State(1, 0, false);
  EXPECT_FALSE(partial.backup_in_sync());
  EXPECT_TRUE(partial.resyncing());
  // A copy not yet whole cannot be promoted.
  EXPECT_EQ(Roles(1, {{{1, -1}, {0, 1}}}, false).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(shard0_link->Deliver(0));  // the values
  EXPECT_EQ(shard0_link->pending(), 2) << "then the dense push and the row push";

  for (const auto& link : links_[0]) link->DeliverAll();
  for (const auto& link : links_[0]) link->Hold(false);
  ExpectBackupEqualsPrimary(0, 0, 1);
  ExpectBackupEqualsPrimary(0, 1, 1);

  // In sync again: a change waits for the backup once more.
  shard0_link->Hold(true);
  proto::PushResponse response;
  const proto::PushRequest push = PushOf("w0", {16, 8}, 1, 7, rng);
  bool answered = false;
  nodes_[0]->Push(&push, nullptr, &response, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    answered = true;
  });
  EXPECT_FALSE(answered);
  shard0_link->DeliverAll();
  EXPECT_TRUE(answered);
  ExpectBackupEqualsPrimary(0, 0, 1);
}

// A shard whose table keeps rows on disk is sent whole in many small parts,
// made as the backup takes them: never more than kStateWindow on the way;
// the pushes made meanwhile are answered at once and sent after the whole
// state; the copy then equals its primary.
TEST_F(ResyncTest, TableWithRowsOnDisk_IsSentInPartsMadeAsTheBackupTakesThem) {
  UseDiskTiers();
  resync_part_bytes_ = 1024;
  Start(0);
  Start(1);
  CreateBoth(proto::ASYNC, 2, /*emb_capacity=*/8);
  std::mt19937 rng(1);
  for (int step = 1; step <= 20; ++step) ASSERT_TRUE(PushShard0(0, 0, step, rng).ok());
  ASSERT_GT(stores_[0]->GetStats().AllTables().rows_on_disk, 8);
  LoseAndResyncPs1();
  ASSERT_EQ(links_[0].size(), 3u);
  HeldLink* shard0_link = links_[0][2].get();
  const int64_t parts = State(0, 0, true).seq();  // every part's seq was taken at the start
  ASSERT_GT(parts, ReplicaSource::kStateWindow + 1);
  EXPECT_EQ(shard0_link->pending(), 1);
  ASSERT_TRUE(PushShard0(0, 0, 21, rng).ok());  // answered, and kept back
  EXPECT_EQ(shard0_link->pending(), 1);
  for (int64_t delivered = 0; delivered < parts; ++delivered) {
    ASSERT_GT(shard0_link->pending(), 0) << "after " << delivered << " of " << parts << " parts";
    EXPECT_LE(shard0_link->pending(), ReplicaSource::kStateWindow);
    EXPECT_TRUE(State(0, 0, true).resyncing());
    ASSERT_TRUE(shard0_link->Deliver(0));
    if (delivered == 2) {
      ASSERT_TRUE(PushShard0(0, 1, 22, rng).ok());
    }
  }
  EXPECT_EQ(shard0_link->pending(), 4) << "the two pushes' dense and row changes, after the state";
  for (const auto& link : links_[0]) link->DeliverAll();
  for (const auto& link : links_[0]) link->Hold(false);
  ExpectBackupEqualsPrimary(0, 0, 1);
  ExpectBackupEqualsPrimary(0, 1, 1);
}

// A step half aggregated when the backup is sent the shard, then the
// primary lost: the promoted copy holds the first worker's gradient (its
// retry is a repeat) and completes the step with the second's, exactly as
// a ps that never failed.
TEST_F(ResyncTest, SyncStepHalfAggregatedIsCarriedByTheResyncedCopy) {
  CreateBoth(proto::SYNC, 2);
  std::mt19937 rng(2);
  // A reference: one store that takes the same two pushes with no failure.
  VariableStore reference;
  {
    proto::CreateVariablesRequest create;
    *create.add_variables() = Dense("w1", {8, 4});
    *create.mutable_optimizer() = Adam();
    create.mutable_sync()->set_mode(proto::SYNC);
    create.mutable_sync()->set_num_workers(2);
    ASSERT_TRUE(reference.Create(create).ok());
  }
  const proto::PushRequest first = PushOf("w1", {8, 4}, 0, 0, rng);
  const proto::PushRequest second = PushOf("w1", {8, 4}, 1, 0, rng);
  proto::PushResponse response;
  ASSERT_TRUE(reference.Push(first, &response).ok());
  ASSERT_TRUE(reference.Push(second, &response).ok());
  ASSERT_EQ(reference.GetStats().max_version, 1);

  // ps 0 is lost and comes back: ps 1 serves shard 0 too, and sends both
  // shards to ps 0 whole. Then worker 0's step 0 reaches ps 1.
  Start(0);
  ASSERT_TRUE(Roles(1, {{{1, -1}, {1, -1}}}, false).ok());
  ASSERT_TRUE(Push(1, first, &response).ok());
  EXPECT_EQ(stores_[1]->GetStats().max_version, 0) << "half a step: accumulated";
  ASSERT_TRUE(Roles(0, {{{1, 0}, {1, 0}}}, true).ok());
  ASSERT_TRUE(Roles(1, {{{1, 0}, {1, 0}}}, true).ok());
  ExpectBackupEqualsPrimary(1, 1, 0);

  // ps 1 is lost: ps 0 serves both shards from its copies, its own shard
  // among them.
  for (const auto& link : links_[1]) link->Fail();
  ASSERT_TRUE(Roles(0, {{{0, -1}, {0, -1}}}, false).ok());
  ASSERT_TRUE(Push(0, first, &response).ok());
  EXPECT_TRUE(response.duplicate()) << "the copy holds worker 0's push of step 0";
  ASSERT_TRUE(Push(0, second, &response).ok());
  EXPECT_FALSE(response.duplicate());
  std::shared_ptr<VariableStore> serving = nodes_[0]->StoreFor("w1");
  EXPECT_NE(serving.get(), stores_[0].get());
  EXPECT_EQ(serving->GetStats().max_version, 1);
  EXPECT_EQ(serving->Digest().value(), reference.Digest().value());
}

// ps 0 comes back and is made the backup of its own shard, now served by
// ps 1; then ps 1 is lost, and ps 0 serves its shard again from that copy,
// not from its own store (empty since the restart).
TEST_F(ResyncTest, PsServesItsOwnShardAgainFromItsCopy) {
  CreateBoth(proto::ASYNC, 1);
  std::mt19937 rng(3);
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE(PushShard0(0, 0, step, rng).ok());
  const uint64_t digest = State(0, 0, true).digest();
  Start(0);
  ASSERT_TRUE(Roles(1, {{{1, -1}, {1, -1}}}, false).ok());
  ASSERT_TRUE(Roles(0, {{{1, 0}, {1, 0}}}, true).ok());
  ASSERT_TRUE(Roles(1, {{{1, 0}, {1, 0}}}, true).ok());
  ExpectBackupEqualsPrimary(1, 0, 0);
  // ps 0's own store serves nothing now: a save of shard 0 there is refused.
  proto::SaveRequest save;
  save.set_phase(proto::SaveRequest::SNAPSHOT);
  save.set_shard(0);
  proto::SaveResponse saved;
  EXPECT_EQ(Await([&](Done d) { nodes_[0]->Save(&save, &saved, std::move(d)); }).code(),
            absl::StatusCode::kFailedPrecondition);

  for (const auto& link : links_[1]) link->Fail();
  ASSERT_TRUE(Roles(0, {{{0, -1}, {0, -1}}}, false).ok());
  EXPECT_EQ(State(0, 0, true).digest(), digest) << "shard 0 as it was before both failures";
  EXPECT_NE(nodes_[0]->StoreFor("w0").get(), stores_[0].get());
  ASSERT_TRUE(PushShard0(0, 0, 4, rng).ok());
  EXPECT_EQ(stores_[0]->GetStats().pushes_applied, 0);
}

// Pushes (plain, PushPull, by rows) go on from two threads while ps 0,
// alone since ps 1 was lost, starts sending its shard to ps 1 again (and
// again, eight times): each change is either in the state sent or
// forwarded after it, none slips between (the backup ends equal to its
// primary).
TEST_F(ResyncTest, ChangesRacingTheStartOfAResyncAreInTheStateOrForwarded) {
  CreateBoth(proto::ASYNC, 2);
  Start(1);
  ASSERT_TRUE(Roles(0, {{{0, -1}, {0, -1}}}, false).ok());
  std::atomic<int> failures{0};
  absl::Notification started;
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(20 + w);
      for (int step = 1; step <= 150; ++step) {
        if (w == 0 && step == 30) started.Notify();
        proto::PushPullRequest pushpull;
        *pushpull.mutable_push() = PushOf("w0", {16, 8}, w, 2 * step, rng);
        proto::PullResponse answer;
        if (!Await([&](Done d) {
               nodes_[0]->PushPull(&pushpull, nullptr, &answer, std::move(d));
             }).ok() ||
            !PushShard0(0, w, 2 * step + 1, rng).ok()) {
          ++failures;
        }
      }
    });
  }
  started.WaitForNotification();
  // Several times over: dropped (alone), then sent whole again.
  for (int round = 0; round < 8; ++round) {
    if (round > 0) {
      EXPECT_TRUE(Roles(0, {{{0, -1}, {0, -1}}}, false).ok());
    }
    EXPECT_TRUE(Roles(1, {{{0, 1}, {0, 1}}}, true).ok());
    EXPECT_TRUE(Roles(0, {{{0, 1}, {0, 1}}}, true).ok());
  }
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(failures.load(), 0);
  ExpectBackupEqualsPrimary(0, 0, 1);
}

// ps 0's forward fails with a push in flight (its backup could be promoted:
// the push is held), and the chief, taking ps 0 for lost, moves shard 0 to
// ps 1. Once ps 0 hears it, the held push is answered Unavailable (not OK:
// ps 1 never had it), and so is every push after; the worker's retry on
// ps 1 is applied there.
TEST_F(ResyncTest, HeldCallersOfAShardThatMovedAreSentToItsNewPrimary) {
  CreateBoth(proto::ASYNC, 1);
  std::mt19937 rng(5);
  ASSERT_TRUE(PushShard0(0, 0, 1, rng).ok());
  links_[0][0]->Fail();
  const proto::PushRequest push = PushOf("w0", {16, 8}, 0, 2, rng);
  proto::PushResponse response;
  absl::Status held = absl::UnknownError("not answered");
  nodes_[0]->Push(&push, nullptr, &response, [&](absl::Status s) { held = std::move(s); });
  EXPECT_EQ(held.code(), absl::StatusCode::kUnknown) << "held while ps 1 may be promoted";

  ASSERT_TRUE(Roles(1, {{{1, -1}, {1, -1}}}, false).ok());
  ASSERT_TRUE(Roles(0, {{{1, -1}, {1, -1}}}, false).ok());
  EXPECT_EQ(held.code(), absl::StatusCode::kUnavailable) << held;
  EXPECT_EQ(Push(0, push, &response).code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(Push(1, push, &response).ok());
  EXPECT_FALSE(response.duplicate()) << "ps 1 never had it";
}

// The backup is lost while it is being sent the shard (never whole, so
// nobody may promote it): the primary goes on alone at once.
TEST_F(ResyncTest, BackupLostDuringItsResyncLeavesThePrimaryAlone) {
  CreateBoth(proto::ASYNC, 1);
  std::mt19937 rng(4);
  ASSERT_TRUE(PushShard0(0, 0, 1, rng).ok());
  LoseAndResyncPs1();
  for (const auto& link : links_[0]) link->Fail();
  const proto::ReplicaState alone = State(0, 0, true);
  EXPECT_FALSE(alone.backup_in_sync());
  EXPECT_FALSE(alone.resyncing());
  ASSERT_TRUE(PushShard0(0, 0, 2, rng).ok());  // answered at once, not held
}

}  // namespace
}  // namespace pst::ps
