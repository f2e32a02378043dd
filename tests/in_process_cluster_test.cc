// The recovery protocol on a whole cluster in one process (see
// in_process_cluster.h): the chief's Job, two workers running the real
// worker loop, and two ps, in SYNC mode so that a run's parameters are a
// function of the batches it applied, bit for bit (the sum of two gradients
// does not depend on their order). Every test drives the chief tick by tick
// and holds the workers at chosen data positions, so each outcome is exact:
// the global steps, generations and data positions the chief, the
// checkpoints and the ps record, and parameters equal to a fault-free run's.
#include "tests/in_process_cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "nlohmann/json.hpp"

namespace pst::testing {
namespace {

using Config = InProcessCluster::Config;

// 32 examples over 2 workers in batches of 4 for 2 epochs: 8 rounds.
Config Sync(int64_t save_steps) {
  Config config;
  config.save_steps = save_steps;
  return config;
}

// The parameters of the fault-free run (saves do not change them).
const client::Values& FaultFree() {
  static const client::Values* const params =
      new client::Values(InProcessCluster::FaultFreeParameters(Sync(0)));
  return *params;
}

std::vector<int64_t> Positions(const proto::CheckpointManifest& manifest) {
  return {manifest.worker_positions().begin(), manifest.worker_positions().end()};
}

nlohmann::json Summary(const InProcessCluster& cluster) {
  std::ifstream in(cluster.summary_json());
  return nlohmann::json::parse(in);
}

// Trains to step 6 while ps 1 dies between its snapshot and its write of
// the save at step 6.
void LosePs1InTheSaveAt6(InProcessCluster& cluster) {
  cluster.chief_control().SetInterceptor(
      [&cluster](int ps, const google::protobuf::Message& request) -> absl::Status {
        const auto* save = dynamic_cast<const proto::SaveRequest*>(&request);
        if (ps != 1 || save == nullptr || save->phase() != proto::SaveRequest::WRITE) {
          return absl::OkStatus();
        }
        cluster.ps().Restart(1);
        return absl::UnavailableError("ps 1 died in the middle of a save");
      });
  cluster.SettleAt(6);
  cluster.chief_control().SetInterceptor(nullptr);
}

// Every ps of `cluster` holds `generation` at version `step` and was told
// to shut down.
void ExpectEveryPsEnded(InProcessCluster& cluster, int64_t generation, int64_t step) {
  for (int p = 0; p < cluster.config().num_ps; ++p) {
    const proto::HealthResponse health = cluster.Health(p);
    EXPECT_EQ(health.generation(), generation) << "ps " << p;
    EXPECT_EQ(health.max_version(), step) << "ps " << p;
    EXPECT_TRUE(cluster.ps().server(p)->shutdown.stopped()) << "ps " << p;
  }
}

TEST(InProcessClusterTest, FaultFreeJob_SavesWhereHeld_EndsAtTheFinalStep) {
  InProcessCluster cluster(Sync(4));
  ASSERT_EQ(cluster.final_step(), 8);
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(4);
  const std::optional<proto::CheckpointManifest> at4 = cluster.Checkpoint(4);
  ASSERT_TRUE(at4.has_value());
  EXPECT_EQ(Positions(*at4), (std::vector<int64_t>{4, 4}));
  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());

  const std::optional<proto::CheckpointManifest> final = cluster.Checkpoint(8);
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(Positions(*final), (std::vector<int64_t>{8, 8}));
  ExpectEveryPsEnded(cluster, /*generation=*/0, /*step=*/8);
  EXPECT_TRUE(cluster.job().recoveries().empty());
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  const nlohmann::json summary = Summary(cluster);
  EXPECT_EQ(summary["global_step"], 8);
  EXPECT_EQ(summary["pushes"], 16);
  EXPECT_EQ(summary["examples"], 64);
  EXPECT_TRUE(summary["recoveries"].empty());
}

// A sync job of --ps_replicas=2, with no checkpoints.
Config Replicated() {
  Config config = Sync(0);
  config.ps_replicas = 2;
  return config;
}

// Starts the job, lets every worker reach step 4, then restarts ps 0 (it
// comes back empty) and lets the chief look once: its shard fails over.
void FailPs0OverAtStep4(InProcessCluster& cluster) {
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(4);
  cluster.ps().Restart(0);
  ASSERT_TRUE(cluster.clock().Tick());
}

// --ps_replicas=2: ps 0 dies at step 4 (and comes back empty); its shard's
// backup on ps 1 takes over, and ps 0 is sent both shards whole. Then ps 1
// dies: ps 0 takes both over. No restore, no new generation, no worker
// goes back, and the job ends with the fault-free parameters, bit for bit.
TEST(InProcessFailoverTest, PrimaryLost_BackupTakesOver_NoRestore_EndsAsFaultFree) {
  InProcessCluster cluster(Replicated());
  FailPs0OverAtStep4(cluster);
  ASSERT_EQ(cluster.job().failovers().size(), 1u);
  EXPECT_TRUE(cluster.job().recoveries().empty());
  const chief::Coordinator::Snapshot snap = cluster.Check();
  EXPECT_EQ(snap.phase, proto::PHASE_RUNNING);
  EXPECT_EQ(snap.generation, 0);
  EXPECT_EQ(snap.global_step, 4);
  EXPECT_EQ(snap.positions, (std::vector<int64_t>{4, 4}));
  // ps 1 serves both shards, at the version ps 0 had reached.
  EXPECT_EQ(cluster.Health(1).max_version(), 4);

  // The workers go on to step 6 on ps 1. Meanwhile ps 0, back empty, is
  // made the backup of both shards and sent them whole; at the next look
  // both backups are in sync.
  cluster.SettleAt(6);
  ASSERT_EQ(cluster.job().resyncs().size(), 2u);
  EXPECT_EQ(cluster.job().resyncs()[0].backup, 0);
  EXPECT_EQ(cluster.job().replicas().in_sync(), 2);
  // Then ps 1 dies too: ps 0 serves both shards from those copies (its own
  // among them), again with no restore.
  cluster.ps().Restart(1);
  ASSERT_TRUE(cluster.clock().Tick());
  ASSERT_EQ(cluster.job().failovers().size(), 2u);
  EXPECT_TRUE(cluster.job().recoveries().empty());
  EXPECT_EQ(cluster.Health(0).max_version(), 6);
  EXPECT_EQ(cluster.Check().global_step, 6);

  cluster.ReleaseAll();
  const absl::Status finished = cluster.FinishJob();
  ASSERT_TRUE(finished.ok()) << finished;
  EXPECT_EQ(cluster.gate().FirstPosition(0, 1), -1) << "no worker went back";
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  const nlohmann::json summary = Summary(cluster);
  EXPECT_EQ(summary["global_step"], 8);
  EXPECT_TRUE(summary["recoveries"].empty());
  ASSERT_EQ(summary["failovers"].size(), 2u);
  EXPECT_EQ(summary["failovers"][0]["steps_lost"], 0);
  EXPECT_EQ(summary["failovers"][0]["shards"][0]["new_primary"], 1);
  EXPECT_EQ(summary["failovers"][1]["steps_lost"], 0);
  EXPECT_EQ(summary["failovers"][1]["shards"].size(), 2u);
}

// --ps_replicas=2: ps 0 fails over to ps 1 and is resynced, then the chief
// crashes and a new one starts. It learns from the ps where the shards are
// now (both served by ps 1, backed up on ps 0) and goes on from there: no
// restore (this job has no checkpoint to restore from), no rewind, the
// fault-free parameters at the end.
TEST(InProcessFailoverTest, ChiefRestartAfterAFailover_LearnsTheLayoutFromThePs_NoRestore) {
  InProcessCluster cluster(Replicated());
  FailPs0OverAtStep4(cluster);
  ASSERT_EQ(cluster.job().failovers().size(), 1u);
  cluster.SettleAt(6);
  EXPECT_EQ(cluster.job().replicas().in_sync(), 2);

  EXPECT_EQ(cluster.CrashChief().code(), absl::StatusCode::kCancelled);
  cluster.StartChief();
  ASSERT_TRUE(cluster.Await([&] {
    const chief::Coordinator::Snapshot snap = cluster.Check();
    return snap.registered == 2 && snap.positions == std::vector<int64_t>{6, 6};
  }));
  EXPECT_EQ(cluster.Check().generation, 0);
  cluster.ReleaseAll();
  const absl::Status finished = cluster.FinishJob();
  ASSERT_TRUE(finished.ok()) << finished;
  EXPECT_TRUE(cluster.job().recoveries().empty());
  EXPECT_EQ(cluster.gate().FirstPosition(0, 1), -1) << "no worker went back";
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  const nlohmann::json summary = Summary(cluster);
  for (const nlohmann::json& shard : summary["replication"]["shards"]) {
    EXPECT_EQ(shard["primary"], 1) << shard.dump();
    EXPECT_EQ(shard["backup"], 0) << shard.dump();
    EXPECT_EQ(shard["digests_match"], true) << shard.dump();
  }
}

TEST(InProcessRecoveryTest, PsLostDuringASave_RestoresThePreviousCheckpoint_EndsAsFaultFree) {
  InProcessCluster cluster(Sync(3));
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(3);
  ASSERT_TRUE(cluster.Checkpoint(3).has_value());

  LosePs1InTheSaveAt6(cluster);
  EXPECT_FALSE(std::filesystem::exists(
      absl::StrCat(cluster.checkpoint_dir(), "/", common::CheckpointDirName(6))))
      << "a save that failed leaves nothing behind";
  EXPECT_TRUE(cluster.job().recoveries().empty()) << "found at the next look at the ps";

  ASSERT_TRUE(cluster.clock().Tick());
  ASSERT_EQ(cluster.job().recoveries().size(), 1u);
  EXPECT_EQ(cluster.job().recoveries()[0].step_before, 6);
  EXPECT_EQ(cluster.job().recoveries()[0].restored_step, 3);
  const chief::Coordinator::Snapshot snap = cluster.Check();
  EXPECT_EQ(snap.phase, proto::PHASE_RUNNING);
  EXPECT_EQ(snap.generation, 1);
  EXPECT_EQ(snap.global_step, 3);
  EXPECT_EQ(snap.positions, (std::vector<int64_t>{3, 3}));
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(cluster.Health(p).generation(), 1);
    EXPECT_EQ(cluster.Health(p).max_version(), 3);
  }

  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());
  EXPECT_EQ(cluster.gate().FirstPosition(0, 1), 3);
  EXPECT_EQ(cluster.gate().FirstPosition(1, 1), 3);
  const std::optional<proto::CheckpointManifest> final = cluster.Checkpoint(8);
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(Positions(*final), (std::vector<int64_t>{8, 8}));
  ExpectEveryPsEnded(cluster, /*generation=*/1, /*step=*/8);
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  const nlohmann::json summary = Summary(cluster);
  EXPECT_EQ(summary["global_step"], 8);
  ASSERT_EQ(summary["recoveries"].size(), 1u);
  EXPECT_EQ(summary["recoveries"][0]["restored_step"], 3);
  EXPECT_EQ(summary["recoveries"][0]["steps_lost"], 3);
  // Both workers had trained to position 6 and went back to 3.
  EXPECT_EQ(summary["recoveries"][0]["steps_redone"], (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(summary["recoveries"][0]["steps_redone_total"], 6);
  EXPECT_EQ(summary["recoveries"][0]["steps_redone_reported"], true);
  EXPECT_EQ(summary["steps_redone_total"], 6);
}

TEST(InProcessRecoveryTest, PsLostAfterTheWorkersFinished_TheyRedoTheirLastSteps_EndAsFaultFree) {
  InProcessCluster cluster(Sync(4));
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(4);
  ASSERT_TRUE(cluster.Checkpoint(4).has_value());
  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.Await([&] { return cluster.Check().all_done; }));
  EXPECT_EQ(cluster.Check().positions, (std::vector<int64_t>{8, 8}));
  for (int p = 0; p < 2; ++p) EXPECT_EQ(cluster.Health(p).max_version(), 8);

  // ps 0 dies as the final save begins, after the evaluation.
  int lost = 0;
  cluster.chief_control().SetInterceptor(
      [&](int ps, const google::protobuf::Message& request) -> absl::Status {
        const auto* save = dynamic_cast<const proto::SaveRequest*>(&request);
        if (ps != 0 || save == nullptr || lost > 0) return absl::OkStatus();
        ++lost;
        cluster.ps().Restart(0);
        return absl::UnavailableError("ps 0 died at the final save");
      });
  // Where the workers go back to, they wait.
  for (int w = 0; w < 2; ++w) cluster.gate().HoldAt(w, 4);
  ASSERT_TRUE(cluster.clock().Tick());
  ASSERT_EQ(lost, 1);
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  ASSERT_EQ(cluster.job().recoveries().size(), 1u);
  EXPECT_EQ(cluster.job().recoveries()[0].step_before, 8);
  EXPECT_EQ(cluster.job().recoveries()[0].restored_step, 4);
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.gate().AwaitHeld(w, 4));
  const chief::Coordinator::Snapshot snap = cluster.Check();
  EXPECT_EQ(snap.generation, 1);
  EXPECT_EQ(snap.positions, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(snap.done, 0) << "the finished workers train again from the checkpoint";
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(cluster.Health(p).generation(), 1);
    EXPECT_EQ(cluster.Health(p).max_version(), 4);
  }

  cluster.ReleaseAll();

  ASSERT_TRUE(cluster.FinishJob().ok());
  EXPECT_EQ(cluster.gate().FirstPosition(0, 1), 4);
  EXPECT_EQ(cluster.gate().FirstPosition(1, 1), 4);
  const std::optional<proto::CheckpointManifest> final = cluster.Checkpoint(8);
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(Positions(*final), (std::vector<int64_t>{8, 8}));
  ExpectEveryPsEnded(cluster, /*generation=*/1, /*step=*/8);
  ASSERT_EQ(cluster.evaluated().size(), 2u);
  EXPECT_EQ(cluster.evaluated()[1], FaultFree());
  const nlohmann::json summary = Summary(cluster);
  EXPECT_EQ(summary["global_step"], 8);
  // They had finished (position 8) and went back to 4: 4 batches each again.
  ASSERT_EQ(summary["recoveries"].size(), 1u);
  EXPECT_EQ(summary["recoveries"][0]["steps_lost"], 4);
  EXPECT_EQ(summary["recoveries"][0]["steps_redone"], (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(summary["recoveries"][0]["steps_redone_reported"], true);
  EXPECT_EQ(summary["steps_redone_total"], 8);
}

TEST(InProcessRecoveryTest, ChiefRestart_GoesOnFromThePsWithoutARestore_EndsAsFaultFree) {
  InProcessCluster cluster(Sync(4));
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(4);
  ASSERT_TRUE(cluster.Checkpoint(4).has_value());
  for (int w = 0; w < 2; ++w) cluster.gate().HoldAt(w, 6);
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.gate().AwaitHeld(w, 6));
  ASSERT_TRUE(cluster.Await([&] {
    return cluster.Check().positions == std::vector<int64_t>{6, 6};
  }));

  EXPECT_EQ(cluster.CrashChief().code(), absl::StatusCode::kCancelled);
  for (int p = 0; p < 2; ++p) {
    EXPECT_FALSE(cluster.ps().server(p)->shutdown.stopped()) << "a crashed chief tells no one";
    EXPECT_EQ(cluster.Health(p).max_version(), 6);
  }

  cluster.StartChief();
  // The workers register again with the new coordinator, and tell it where
  // they are.
  ASSERT_TRUE(cluster.Await([&] {
    const chief::Coordinator::Snapshot snap = cluster.Check();
    return snap.registered == 2 && snap.positions == std::vector<int64_t>{6, 6};
  }));
  EXPECT_EQ(cluster.Check().generation, 0);
  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());
  EXPECT_TRUE(cluster.job().recoveries().empty()) << "the ps kept their state";
  EXPECT_EQ(cluster.gate().FirstPosition(0, 1), -1) << "no generation 1";
  const std::optional<proto::CheckpointManifest> final = cluster.Checkpoint(8);
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(Positions(*final), (std::vector<int64_t>{8, 8}));
  ExpectEveryPsEnded(cluster, /*generation=*/0, /*step=*/8);
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
}

TEST(InProcessRecoveryTest, WorkerRestart_GoesOnFromItsPositionOnThePs_EndsAsFaultFree) {
  InProcessCluster cluster(Sync(0));
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(5);
  const uint64_t first = cluster.incarnation(1);
  cluster.CrashWorker(1).IgnoreError();

  cluster.StartWorker(1);
  const uint64_t second = cluster.incarnation(1);
  ASSERT_NE(first, second);
  // The new incarnation's first push is batch 5, where the last one's
  // pushes left off on the ps.
  ASSERT_TRUE(cluster.gate().AwaitHeld(1, 5));
  EXPECT_EQ(cluster.gate().FirstPositionOf(1, first), 0);
  EXPECT_EQ(cluster.gate().FirstPositionOf(1, second), 5);
  EXPECT_EQ(cluster.Check().generation, 0);

  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());
  EXPECT_TRUE(cluster.job().recoveries().empty());
  ExpectEveryPsEnded(cluster, /*generation=*/0, /*step=*/8);
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  const nlohmann::json summary = Summary(cluster);
  EXPECT_EQ(summary["global_step"], 8);
  EXPECT_EQ(summary["pushes"], 16) << "5 + 3 steps of worker 1's two incarnations, 8 of worker 0";
}

TEST(InProcessRecoveryTest, PushRetriedAfterALostAnswer_IsAppliedOnce_EndsAsFaultFree) {
  InProcessCluster cluster(Sync(0));
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(3);
  // Worker 0's push of batch 3 reaches both ps, its answers do not; worker
  // 1 holds at 3, so the round is still open when worker 0 tries again.
  cluster.gate().LoseAnswer(0, 3);
  cluster.gate().HoldAt(0, 4);
  ASSERT_TRUE(cluster.Await([&] {
    for (int p = 0; p < 2; ++p) {
      if (cluster.Health(p).duplicates_ignored() != 1) return false;
    }
    return true;
  })) << "the retry reached every ps once and was recognized";
  for (int p = 0; p < 2; ++p) EXPECT_EQ(cluster.Health(p).max_version(), 3) << "round 3 is open";

  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());
  for (int p = 0; p < 2; ++p) {
    const proto::HealthResponse health = cluster.Health(p);
    EXPECT_EQ(health.duplicates_ignored(), 1);
    EXPECT_EQ(health.stale_dropped(), 0);
    EXPECT_EQ(health.max_version(), 8);
  }
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], FaultFree());
  EXPECT_EQ(Summary(cluster)["pushes"], 16) << "the lost answer's step counts once";
}

// logreg in SYNC: a hash table's row pushes summed per step with the
// dense ones, 32 examples over 2 workers in batches of 4 for 2 epochs.
Config SyncTable(int64_t save_steps) {
  Config config = Sync(save_steps);
  config.model = "logreg";
  return config;
}

const client::Values& TableFaultFree() {
  static const client::Values* const params =
      new client::Values(InProcessCluster::FaultFreeParameters(SyncTable(0)));
  return *params;
}

// As PsLostDuringASave_RestoresThePreviousCheckpoint_EndsAsFaultFree, with
// a hash table: the checkpoint at step 3 holds every row of step 2 and none
// of step 3 (the workers' row pushes held with their dense ones), the lost
// steps' rows are redone once, and the job ends with the fault-free bias
// and rows, bit for bit.
TEST(InProcessRecoveryTest, SyncTable_PsLostDuringASave_RestoresThePreviousCheckpoint_EndsAsFaultFree) {
  const client::Values& fault_free = TableFaultFree();
  ASSERT_EQ(fault_free.size(), 2u);
  ASSERT_FALSE(fault_free[1].empty());
  EXPECT_TRUE(std::any_of(fault_free[1].begin(), fault_free[1].end(),
                          [](float v) { return v != 0; }))
      << "training moved the table's rows (they start at zero)";

  InProcessCluster cluster(SyncTable(3));
  cluster.StartChief();
  cluster.StartWorkers();
  cluster.SettleAt(3);
  ASSERT_TRUE(cluster.Checkpoint(3).has_value());

  LosePs1InTheSaveAt6(cluster);
  ASSERT_TRUE(cluster.clock().Tick());
  ASSERT_EQ(cluster.job().recoveries().size(), 1u);
  EXPECT_EQ(cluster.job().recoveries()[0].step_before, 6);
  EXPECT_EQ(cluster.job().recoveries()[0].restored_step, 3);
  EXPECT_EQ(cluster.Check().positions, (std::vector<int64_t>{3, 3}));

  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());
  EXPECT_EQ(cluster.gate().FirstPosition(0, 1), 3);
  EXPECT_EQ(cluster.gate().FirstPosition(1, 1), 3);
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], fault_free);
  EXPECT_EQ(Summary(cluster)["global_step"], 8);
}

// Incremental saves every 2 steps, no full ones by steps: the first save
// (step 2) is full, the next two are links on it. ps 1 dies after the last
// link; the chief restores every ps from the chain (its full checkpoint and
// both links), the workers go back to step 6, and the job ends with the
// fault-free bias and rows, bit for bit. The final checkpoint is full.
TEST(InProcessRecoveryTest, SyncTable_PsLost_RestoresAnIncrementalChain_EndsAsFaultFree) {
  Config config = SyncTable(0);
  config.incremental_save_steps = 2;
  InProcessCluster cluster(config);
  cluster.StartChief();
  cluster.StartWorkers();
  for (int64_t step : {2, 4, 6}) {
    cluster.SettleAt(step);
    ASSERT_TRUE(cluster.Checkpoint(step).has_value()) << step;
  }
  EXPECT_TRUE(cluster.Checkpoint(2)->base().empty());
  EXPECT_EQ(cluster.Checkpoint(4)->base(), common::CheckpointDirName(2));
  EXPECT_EQ(cluster.Checkpoint(6)->base(), common::CheckpointDirName(4));

  cluster.ps().Restart(1);
  ASSERT_TRUE(cluster.clock().Tick());
  ASSERT_EQ(cluster.job().recoveries().size(), 1u);
  EXPECT_EQ(cluster.job().recoveries()[0].restored_step, 6);
  EXPECT_EQ(cluster.Check().positions, (std::vector<int64_t>{6, 6}));

  cluster.ReleaseAll();
  ASSERT_TRUE(cluster.FinishJob().ok());
  ASSERT_EQ(cluster.evaluated().size(), 1u);
  EXPECT_EQ(cluster.evaluated()[0], TableFaultFree());
  const std::optional<proto::CheckpointManifest> final = cluster.Checkpoint(8);
  ASSERT_TRUE(final.has_value());
  EXPECT_TRUE(final->base().empty()) << "the final checkpoint stands alone";
  const nlohmann::json summary = Summary(cluster);
  ASSERT_GE(summary["saves"].size(), 3u);
  EXPECT_EQ(summary["saves"][0]["incremental"], false);
  EXPECT_EQ(summary["saves"][1]["incremental"], true);
}

}  // namespace
}  // namespace pst::testing
