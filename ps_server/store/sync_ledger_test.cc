// SyncLedger (sync_ledger.h) on its own: the config set once, worker
// checks, retried pushes recognized, membership and quorum, pulls parked
// until their clock or version comes, the cut, and its state carried over.
#include "ps_server/store/sync_ledger.h"

#include <gtest/gtest.h>

#include <vector>

namespace pst::ps {
namespace {

proto::SyncConfig Config(proto::SyncMode mode, int workers, int replicas = 0, int staleness = 0) {
  proto::SyncConfig sync;
  sync.set_mode(mode);
  sync.set_num_workers(workers);
  sync.set_replicas_to_aggregate(replicas);
  sync.set_staleness(staleness);
  return sync;
}

proto::PullRequest PullOf(int worker, int64_t clock, int64_t min_version = 0) {
  proto::PullRequest pull;
  pull.set_worker_index(worker);
  pull.set_clock(clock);
  pull.set_min_version(min_version);
  return pull;
}

bool Never(const proto::PullRequest&) { return false; }

TEST(SyncLedgerTest, CheckConfig_BadOrDifferentFromTheOneSet_IsRefused) {
  SyncLedger ledger(/*max_workers=*/8, /*max_parked=*/4);
  EXPECT_EQ(ledger.CheckConfig(Config(proto::SYNC, 2, 3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.CheckConfig(Config(proto::SYNC, 0)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ledger.CheckConfig(Config(proto::SYNC, 3, 2)).ok());
  ledger.SetConfigOnce(Config(proto::SYNC, 3, 2));
  EXPECT_EQ(ledger.quorum(), 2);
  EXPECT_TRUE(ledger.CheckConfig(Config(proto::SYNC, 3, 2)).ok());
  EXPECT_EQ(ledger.CheckConfig(Config(proto::ASYNC, 3)).code(),
            absl::StatusCode::kFailedPrecondition);
  ledger.SetConfigOnce(Config(proto::ASYNC, 3));  // set once: no change
  EXPECT_EQ(ledger.mode(), proto::SYNC);
}

TEST(SyncLedgerTest, CheckWorker_OutsideTheJob_IsInvalidArgument) {
  SyncLedger ledger(/*max_workers=*/8, /*max_parked=*/4);
  EXPECT_TRUE(ledger.CheckWorker(7, false).ok());  // no config: max_workers
  EXPECT_FALSE(ledger.CheckWorker(8, false).ok());
  ledger.SetConfigOnce(Config(proto::ASYNC, 2));
  EXPECT_TRUE(ledger.CheckWorker(1, false).ok());
  EXPECT_EQ(ledger.CheckWorker(2, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ledger.CheckWorker(-1, /*allow_none=*/true).ok());
  EXPECT_FALSE(ledger.CheckWorker(-1, /*allow_none=*/false).ok());
}

TEST(SyncLedgerTest, BeginDensePush_RepeatedStep_IsADuplicatePerPartAndIncarnation) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::ASYNC, 2));
  bool dup = true;
  ASSERT_EQ(*ledger.BeginDensePush(0, /*part=*/0, /*incarnation=*/9, /*step=*/5, &dup),
            proto::ASYNC);
  EXPECT_FALSE(dup);
  ASSERT_TRUE(ledger.BeginDensePush(0, 0, 9, 5, &dup).ok());
  EXPECT_TRUE(dup);
  ASSERT_TRUE(ledger.BeginDensePush(0, 0, 9, 4, &dup).ok());
  EXPECT_TRUE(dup);
  ASSERT_TRUE(ledger.BeginDensePush(0, /*part=*/1, 9, 5, &dup).ok());
  EXPECT_FALSE(dup);
  ASSERT_TRUE(ledger.BeginDensePush(0, 0, /*incarnation=*/10, 1, &dup).ok());
  EXPECT_FALSE(dup);  // a restarted worker starts over
  ASSERT_TRUE(ledger.BeginDensePush(1, 0, /*incarnation=*/0, 1, &dup).ok());
  ASSERT_TRUE(ledger.BeginDensePush(1, 0, 0, 1, &dup).ok());
  EXPECT_FALSE(dup);  // no incarnation: never recognized
  EXPECT_FALSE(ledger.BeginDensePush(2, 0, 9, 1, &dup).ok());
  // Row pushes are counted apart from dense ones.
  proto::SyncMode mode = proto::SSP;
  EXPECT_FALSE(*ledger.BeginRowPush(0, 10, 1, &mode));
  EXPECT_EQ(mode, proto::ASYNC);
  EXPECT_TRUE(*ledger.BeginRowPush(0, 10, 1, &mode));
  EXPECT_FALSE(ledger.BeginRowPush(5, 10, 1, &mode).ok());
}

TEST(SyncLedgerTest, BeginDensePush_Sync_LeavesRepeatsToTheVariables) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::SYNC, 2));
  bool dup = true;
  ASSERT_EQ(*ledger.BeginDensePush(0, 0, 9, 5, &dup), proto::SYNC);
  ASSERT_TRUE(ledger.BeginDensePush(0, 0, 9, 5, &dup).ok());
  EXPECT_FALSE(dup);
}

TEST(SyncLedgerTest, BeginRowPush_Sync_LeavesRepeatsToTheRowAggregates) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::SYNC, 2));
  proto::SyncMode mode = proto::ASYNC;
  EXPECT_FALSE(*ledger.BeginRowPush(0, 10, 1, &mode));
  EXPECT_EQ(mode, proto::SYNC);
  EXPECT_FALSE(*ledger.BeginRowPush(0, 10, 1, &mode)) << "SYNC: the aggregate recognizes it";
  EXPECT_FALSE(ledger.BeginRowPush(2, 10, 1, &mode).ok()) << "not a worker of the job";
  std::vector<proto::WorkerCut> cut = ledger.Cut();
  EXPECT_TRUE(cut.empty()) << "nothing recorded";
}

TEST(SyncLedgerTest, SetMembership_LowersTheQuorumToTheActiveWorkers) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::SYNC, 3));
  EXPECT_EQ(ledger.quorum(), 3);
  proto::MembershipRequest membership;
  membership.add_active_workers(0);
  membership.add_active_workers(2);
  membership.set_replicas_to_aggregate(3);
  ASSERT_TRUE(ledger.SetMembership(membership).ok());
  EXPECT_EQ(ledger.quorum(), 2);
  membership.add_active_workers(3);
  EXPECT_EQ(ledger.SetMembership(membership).code(), absl::StatusCode::kInvalidArgument);
  membership.clear_active_workers();
  membership.set_replicas_to_aggregate(0);
  EXPECT_EQ(ledger.SetMembership(membership).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.quorum(), 2);
}

TEST(SyncLedgerTest, Ssp_PullTooFarAhead_IsParkedUntilTheSlowestActiveWorkerCatchesUp) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::SSP, 2, 0, /*staleness=*/1));
  int done_runs = 0;
  SyncLedger::Done done = [&](absl::Status) { ++done_runs; };
  EXPECT_EQ(*ledger.ParkUnlessReady(PullOf(0, 1), nullptr, &done, Never), 0u);  // 1 - 1 <= 0
  absl::StatusOr<uint64_t> ticket = ledger.ParkUnlessReady(PullOf(0, 3), nullptr, &done, Never);
  ASSERT_TRUE(ticket.ok());
  EXPECT_NE(*ticket, 0u);
  ledger.EndDensePush(proto::SSP, 1, /*step=*/1, /*position=*/-1);  // worker 1 at clock 2
  EXPECT_TRUE(ledger.TakeReady(Never).empty());  // worker 0 still at 0
  ledger.EndDensePush(proto::SSP, 0, 1, 7);
  std::vector<SyncLedger::Waiter> ready = ledger.TakeReady(Never);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].ticket, *ticket);
  ready[0].done(absl::OkStatus());
  EXPECT_EQ(done_runs, 1);
  const SyncLedger::Figures figures = ledger.GetFigures();
  EXPECT_EQ(figures.parked_pulls, 1);
  EXPECT_EQ(figures.max_clock_gap, 1);
  EXPECT_EQ(figures.positions.at(0), 8);
}

TEST(SyncLedgerTest, Sync_PullWaitsForTheVersionsTheCallerReports) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::SYNC, 2));
  bool reached = false;
  auto versions = [&](const proto::PullRequest& r) { return reached && r.min_version() == 3; };
  SyncLedger::Done done = [](absl::Status) {};
  ASSERT_NE(*ledger.ParkUnlessReady(PullOf(0, 0, 3), nullptr, &done, versions), 0u);
  EXPECT_TRUE(ledger.TakeReady(versions).empty());
  reached = true;
  EXPECT_EQ(ledger.TakeReady(versions).size(), 1u);
  // Not a worker (-1): never waits.
  EXPECT_EQ(*ledger.ParkUnlessReady(PullOf(-1, 0, 9), nullptr, &done, Never), 0u);
}

TEST(SyncLedgerTest, Parked_AreCappedCancelledExpiredAndTakenByReset) {
  SyncLedger ledger(8, /*max_parked=*/2);
  ledger.SetConfigOnce(Config(proto::SYNC, 2));
  SyncLedger::Done done = [](absl::Status) {};
  const uint64_t a = *ledger.ParkUnlessReady(PullOf(0, 0, 1), nullptr, &done, Never);
  done = [](absl::Status) {};
  const uint64_t b = *ledger.ParkUnlessReady(PullOf(1, 0, 1), nullptr, &done, Never);
  EXPECT_NE(a, b);
  done = [](absl::Status) {};
  EXPECT_EQ(ledger.ParkUnlessReady(PullOf(1, 0, 1), nullptr, &done, Never).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ledger.Cancel(a));
  EXPECT_FALSE(ledger.Cancel(a));
  EXPECT_TRUE(ledger.TakeExpired(absl::Hours(1)).empty());
  EXPECT_EQ(ledger.TakeExpired(-absl::Seconds(1)).size(), 1u);
  done = [](absl::Status) {};
  ASSERT_NE(*ledger.ParkUnlessReady(PullOf(1, 0, 1), nullptr, &done, Never), 0u);
  EXPECT_EQ(ledger.Reset().size(), 1u);
  EXPECT_TRUE(ledger.TakeAll().empty());
}

TEST(SyncLedgerTest, Cut_SaysEachWorkersLastStepsAndReset_ForgetsThem) {
  SyncLedger ledger(8, 4);
  ledger.SetConfigOnce(Config(proto::ASYNC, 3));
  bool dup;
  ASSERT_TRUE(ledger.BeginDensePush(0, /*part=*/0, 1, 4, &dup).ok());
  ASSERT_TRUE(ledger.BeginDensePush(0, /*part=*/1, 1, 3, &dup).ok());
  proto::SyncMode mode;
  ASSERT_TRUE(ledger.BeginRowPush(1, 1, 6, &mode).ok());
  ledger.EndDensePush(proto::ASYNC, 2, 0, /*position=*/10);
  std::vector<proto::WorkerCut> cut = ledger.Cut();
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[0].worker_index(), 0);
  EXPECT_EQ(cut[0].min_step(), 3);
  EXPECT_EQ(cut[0].max_step(), 4);
  EXPECT_EQ(cut[0].rows_step(), -1);
  EXPECT_EQ(cut[1].min_step(), -1);
  EXPECT_EQ(cut[1].rows_step(), 6);
  EXPECT_EQ(cut[2].position(), 11);
  EXPECT_EQ(cut[2].max_step(), -1);
  ledger.Reset();
  EXPECT_TRUE(ledger.Cut().empty());
}

TEST(SyncLedgerTest, ExportThenLoad_CarriesClocksPushesAndPositions) {
  SyncLedger original(8, 4);
  original.SetConfigOnce(Config(proto::SSP, 2, 0, 1));
  bool dup;
  ASSERT_TRUE(original.BeginDensePush(1, 0, 5, 3, &dup).ok());
  original.EndDensePush(proto::SSP, 1, 3, 2);
  proto::StoreModeState mode;
  original.Export(&mode);

  SyncLedger copy(8, 4);
  copy.SetConfigOnce(Config(proto::SSP, 2, 0, 1));
  ASSERT_TRUE(copy.Load(mode).ok());
  ASSERT_TRUE(copy.BeginDensePush(1, 0, 5, 3, &dup).ok());
  EXPECT_TRUE(dup);  // the push is known there too
  EXPECT_EQ(copy.GetFigures().positions.at(1), 3);
  proto::StoreModeState again;
  copy.Export(&again);
  EXPECT_EQ(again.clocks(1), 4);

  SyncLedger other(8, 4);
  other.SetConfigOnce(Config(proto::SSP, 3, 0, 1));
  EXPECT_EQ(other.Load(mode).code(), absl::StatusCode::kInvalidArgument);  // 3 workers, not 2
}

}  // namespace
}  // namespace pst::ps
