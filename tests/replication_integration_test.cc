// Replicated ps (--ps_replicas=2) on real clusters (`pstrain local`, real
// processes over gRPC): every shard's primary forwards each change to its
// backup on the next ps, and at the end of the job the chief reads both
// copies' digests: every backup equals its primary bit for bit, in every
// mode for dense variables, and for hash embedding tables with admission.
// A killed ps fails over to its backups, comes back, and is sent the shards
// it should back up whole while training goes on, again and again.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kJobTimeout = absl::Seconds(240);

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TestDir(); }

  // Runs a job (replicated, unless told otherwise) to the end; its summary
  // (output_ holds the launcher's output).
  nlohmann::json RunJob(std::vector<std::string> flags, bool replicated = true) {
    const std::string summary = dir_ + "/summary.json";
    flags.insert(flags.begin(), {absl::StrCat("--ps_replicas=", replicated ? 2 : 1),
                                 "--summary_json=" + summary});
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    EXPECT_NE(launcher, nullptr);
    if (launcher == nullptr) return {};
    std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
    output_ = launcher->output();
    EXPECT_TRUE(exited.has_value()) << output_;
    EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << output_;
    return ReadJsonFile(summary);
  }

  // Every shard of `num_ps`: its backup on the next ps, in sync, with the
  // primary's every change applied and the same digest.
  void ExpectEveryBackupEqualsItsPrimary(const nlohmann::json& summary, int num_ps) {
    ASSERT_TRUE(summary.contains("replication")) << summary.dump();
    const nlohmann::json& replication = summary["replication"];
    EXPECT_EQ(replication["replicas"], 2);
    ASSERT_EQ(replication["shards"].size(), static_cast<size_t>(num_ps)) << replication.dump();
    for (int g = 0; g < num_ps; ++g) {
      const nlohmann::json& shard = replication["shards"][g];
      SCOPED_TRACE(shard.dump());
      EXPECT_EQ(shard["primary"], g);
      EXPECT_EQ(shard["backup"], (g + 1) % num_ps);
      EXPECT_EQ(shard["in_sync"], true);
      EXPECT_GT(shard["changes"].get<int64_t>(), 1);  // the create and the pushes
      EXPECT_EQ(shard["backup_changes"], shard["changes"]);
      EXPECT_EQ(shard["digests_match"], true);
    }
    EXPECT_NE(output_.find(absl::StrCat("backups ", num_ps, "/", num_ps, " in sync")),
              std::string::npos)
        << "the progress line shows the backups";
  }

  // Runs a replicated job with `flags` under --restart_failed, kills -9
  // `victim` once training runs with every backup in sync, and waits for the
  // job to end well. Returns its summary (null after a failure), and sets
  // `*killed` to when the kill was sent.
  nlohmann::json RunAndKill(std::vector<std::string> flags, const std::string& victim,
                            absl::Time* killed) {
    const std::string summary_path = dir_ + "/faulted.json";
    flags.insert(flags.end(), {"--ps_replicas=2", "--summary_json=" + summary_path,
                               "--restart_failed", "--peer_timeout_s=5"});
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    EXPECT_NE(launcher, nullptr);
    if (launcher == nullptr) return {};
    const bool training = launcher->WaitForOutput("backups 2/2 in sync", kJobTimeout);
    const std::map<std::string, pid_t> pids = DaemonPids(launcher->output());
    EXPECT_TRUE(training && pids.count(victim) == 1) << launcher->output();
    if (!training || pids.count(victim) != 1) return {};
    EXPECT_EQ(kill(pids.at(victim), SIGKILL), 0);
    *killed = absl::Now();
    return AwaitEnd(*launcher, summary_path);
  }

  // Waits for the job `launcher` runs to end well; its summary (null after
  // a failure).
  nlohmann::json AwaitEnd(TestProcess& launcher, const std::string& summary_path) {
    std::optional<int> exited = launcher.WaitForExit(kJobTimeout);
    output_ = launcher.output();
    EXPECT_TRUE(exited.has_value() && ExitCode(*exited) == 0) << output_;
    if (!exited.has_value() || ExitCode(*exited) != 0) return {};
    return ReadJsonFile(summary_path);
  }

  std::string dir_, output_;
};

TEST_F(ReplicationTest, DenseEveryMode_EveryBackupEqualsItsPrimary) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " is missing";
  for (const char* mode : {"async", "ssp", "sync"}) {
    SCOPED_TRACE(mode);
    const nlohmann::json summary =
        RunJob({"--ps=3", "--workers=2", absl::StrCat("--mode=", mode), "--max_steps=300",
                "--optimizer=adam", "--learning_rate=0.001"});
    ASSERT_TRUE(summary.is_object()) << output_;
    ExpectEveryBackupEqualsItsPrimary(summary, 3);
    EXPECT_GE(summary["test_accuracy"].get<double>(), 0.7);
  }
}

TEST_F(ReplicationTest, HashAndPartitionedTables_EveryBackupEqualsItsPrimary) {
  const std::string data = dir_ + "/criteo.tsv";
  auto gen = TestProcess::Start(
      {BinaryPath("pstrain"), "generate_criteo", "--out=" + data, "--rows=4000", "--seed=3"});
  ASSERT_TRUE(gen.ok()) << gen.status();
  std::optional<int> generated = (*gen)->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(generated.has_value() && ExitCode(*generated) == 0) << (*gen)->output();
  const nlohmann::json summary =
      RunJob({"--ps=2", "--workers=2", "--mode=async", "--model=wide_deep", "--data=" + data,
              "--buckets_per_field=0", "--admit_after=2", "--epochs=1", "--batch_size=128",
              "--optimizer=adagrad", "--learning_rate=0.05"});
  ASSERT_TRUE(summary.is_object()) << output_;
  ExpectEveryBackupEqualsItsPrimary(summary, 2);
  int64_t rows = 0;
  for (const auto& r : summary["hash_rows_per_ps"]) rows += r.get<int64_t>();
  EXPECT_GT(rows, 0) << "the tables made rows on first touch";

  // The same model with row-partitioned tables (--partitioner=fixed: each
  // table cut in 2 partitions by row), trained by rows too.
  const nlohmann::json partitioned =
      RunJob({"--ps=2", "--workers=2", "--mode=async", "--model=wide_deep", "--data=" + data,
              "--buckets_per_field=1000", "--partitioner=fixed", "--num_shards=2", "--epochs=1",
              "--batch_size=128", "--optimizer=adagrad", "--learning_rate=0.05"});
  ASSERT_TRUE(partitioned.is_object()) << output_;
  ExpectEveryBackupEqualsItsPrimary(partitioned, 2);
}

// kill -9 of a shard's primary (ps 0, also the backup of shard 1): its
// backup takes over, and ps 0, restarted, is sent both shards whole and
// becomes their backup. The job has no --checkpoint_dir, so a restore
// (today's recovery) is impossible: it ends well only by failing over.
TEST_F(ReplicationTest, KilledPrimaryAsync_BackupTakesOver_AndTheKilledPsIsResynced) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " is missing";
  absl::Time killed;
  const nlohmann::json summary =
      RunAndKill({"--ps=2", "--workers=2", "--mode=async", "--epochs=2"}, "ps:0", &killed);
  ASSERT_TRUE(summary.is_object()) << output_;
  EXPECT_EQ(summary["recoveries"].size(), 0u) << "no restore: " << summary["recoveries"].dump();
  ASSERT_EQ(summary["failovers"].size(), 1u) << summary.dump();
  const nlohmann::json& failover = summary["failovers"][0];
  EXPECT_EQ(failover["lost_ps"], 0);
  EXPECT_EQ(failover["steps_lost"], 0);
  ASSERT_EQ(failover["shards"].size(), 1u);
  EXPECT_EQ(failover["shards"][0]["shard"], 0);
  EXPECT_EQ(failover["shards"][0]["new_primary"], 1);
  ASSERT_TRUE(failover["shards"][0].contains("first_push_unix_ms")) << failover.dump();
  const double kill_to_first_push =
      (failover["shards"][0]["first_push_unix_ms"].get<int64_t>() - absl::ToUnixMillis(killed)) /
      1e3;
  std::printf(
      "failover: detected %.2f s after the kill, first push on the new primary %.2f s "
      "after it\n",
      (failover["detected_unix_ms"].get<int64_t>() - absl::ToUnixMillis(killed)) / 1e3,
      kill_to_first_push);
  EXPECT_GT(kill_to_first_push, 0);
  // Both shards are now served by ps 1. ps 0 came back empty and was sent
  // both whole while training went on: it is their backup again, in sync,
  // equal to its primary at the end (shard 1's backup was ps 0 all along).
  const nlohmann::json& shards = summary["replication"]["shards"];
  for (int g = 0; g < 2; ++g) {
    SCOPED_TRACE(shards[g].dump());
    EXPECT_EQ(shards[g]["primary"], 1);
    EXPECT_EQ(shards[g]["backup"], 0);
    EXPECT_EQ(shards[g]["in_sync"], true);
    EXPECT_EQ(shards[g]["digests_match"], true);
  }
  ASSERT_EQ(summary["resyncs"].size(), 2u) << summary.dump();
  for (const nlohmann::json& resync : summary["resyncs"]) {
    EXPECT_EQ(resync["backup"], 0);
    ASSERT_TRUE(resync.contains("seconds")) << resync.dump();
    std::printf("resync of shard %d onto ps 0: in sync %.2f s after it was asked for\n",
                resync["shard"].get<int>(), resync["seconds"].get<double>());
  }
  // Every worker's every batch was trained: the job finished its epochs.
  EXPECT_GE(summary["test_accuracy"].get<double>(), 0.8) << summary.dump();
  EXPECT_NE(output_.find("failed over to their backups"), std::string::npos);
  EXPECT_EQ(output_.find("recovering (generation"), std::string::npos) << "no restore began";
}

// In sync mode each version averages one gradient of each worker. The
// pushes in flight to the lost primary are sent again, the same requests,
// to the promoted backup, which applies each once: the job ends at the
// global step of a fault-free job without replication, with its
// parameters bit for bit (the same test loss to the last digit).
TEST_F(ReplicationTest, KilledPrimarySync_EndsBitForBitAsWithoutTheFault) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " is missing";
  const std::vector<std::string> job = {"--ps=2", "--workers=2", "--mode=sync", "--epochs=2"};
  const nlohmann::json baseline = RunJob(job, /*replicated=*/false);
  ASSERT_TRUE(baseline.is_object()) << output_;

  absl::Time killed;
  const nlohmann::json summary = RunAndKill(job, "ps:1", &killed);
  ASSERT_TRUE(summary.is_object()) << output_;
  EXPECT_EQ(summary["recoveries"].size(), 0u);
  ASSERT_EQ(summary["failovers"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["failovers"][0]["shards"][0]["new_primary"], 0);
  EXPECT_EQ(summary["global_step"], baseline["global_step"]) << summary.dump();
  EXPECT_EQ(summary["test_loss"].get<double>(), baseline["test_loss"].get<double>())
      << summary.dump() << "\nfault-free: " << baseline.dump();
}

// Both copies of a shard lost: both ps are killed at once. The job falls
// back to today's recovery: every shard goes back to its own ps, both
// copies are restored from the latest checkpoint, and replication resumes:
// at the end every backup equals its primary again.
TEST_F(ReplicationTest, BothCopiesLost_FallsBackToTheCheckpoint_AndReplicatesAgain) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " is missing";
  const std::string summary_path = dir_ + "/summary.json";
  std::unique_ptr<TestProcess> launcher =
      LaunchLocal({"--ps_replicas=2", "--summary_json=" + summary_path, "--ps=2", "--workers=2",
                   "--mode=async", "--epochs=3", "--restart_failed", "--peer_timeout_s=5",
                   "--checkpoint_dir=" + dir_ + "/ckpt", "--save_checkpoints_steps=150"});
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("saved checkpoint", kJobTimeout)) << launcher->output();
  std::map<std::string, pid_t> pids = DaemonPids(launcher->output());
  ASSERT_EQ(kill(pids.at("ps:0"), SIGKILL), 0);
  ASSERT_EQ(kill(pids.at("ps:1"), SIGKILL), 0);
  const nlohmann::json summary = AwaitEnd(*launcher, summary_path);
  ASSERT_TRUE(summary.is_object()) << output_;
  EXPECT_EQ(summary["failovers"].size(), 0u) << summary.dump();
  EXPECT_EQ(summary["recoveries"].size(), 1u) << summary.dump();
  ExpectEveryBackupEqualsItsPrimary(summary, 2);
  EXPECT_GE(summary["test_accuracy"].get<double>(), 0.8) << summary.dump();
}

// A ps, picked at random, is killed every 10 to 20 seconds for two minutes
// (each time once every shard has a backup in sync again). Every kill is a
// failover (or, for a ps that held only backups, none needed) and resyncs;
// no restore, no step lost. The slow
// worker keeps the job running for the whole time, whatever the machine.
TEST_F(ReplicationTest, RepeatedKills_EveryOneAFailover_NoStepLost) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " is missing";
  const std::string summary_path = dir_ + "/summary.json";
  std::unique_ptr<TestProcess> launcher = LaunchLocal(
      {"--ps_replicas=2", "--summary_json=" + summary_path, "--ps=2", "--workers=2", "--mode=async",
       "--epochs=1", "--slow_worker=1", "--slow_worker_delay_ms=330", "--restart_failed",
       "--max_restarts=30", "--peer_timeout_s=5", "--log_every_s=1"});
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("backups 2/2 in sync", kJobTimeout)) << launcher->output();
  std::mt19937 rng(2026);
  const absl::Time start = absl::Now();
  int kills = 0, failover_kills = 0;
  while (absl::Now() - start < absl::Minutes(2)) {
    const std::string victim = absl::StrCat("ps:", std::uniform_int_distribution<int>(0, 1)(rng));
    const std::map<std::string, pid_t> pids = DaemonPids(launcher->output());
    ASSERT_EQ(pids.count(victim), 1u) << launcher->output();
    const size_t before = launcher->output().size();
    ASSERT_EQ(kill(pids.at(victim), SIGKILL), 0);
    ++kills;
    const absl::Time killed = absl::Now();
    // A ps serving some shard fails over; one holding only backups (it
    // came back since the last kill of it) leaves their primaries alone.
    std::optional<size_t> failed_over, backups_only;
    for (const absl::Time deadline = absl::Now() + absl::Seconds(60);
         !failed_over && !backups_only && absl::Now() < deadline;) {
      failed_over = launcher->WaitForOutputAfter("failed over to their backups", before,
                                                 absl::Milliseconds(100));
      backups_only = launcher->WaitForOutputAfter("it holds no shard's primary", before,
                                                  absl::Milliseconds(100));
    }
    ASSERT_TRUE(failed_over || backups_only) << "kill " << kills << " of " << victim << "\n"
                                             << launcher->output();
    if (failed_over) ++failover_kills;
    const size_t handled = failed_over ? *failed_over : *backups_only;
    ASSERT_TRUE(
        launcher->WaitForOutputAfter("backups 2/2 in sync", handled, absl::Seconds(60)).has_value())
        << "kill " << kills << ": no backup in sync again\n"
        << launcher->output();
    const absl::Duration next = absl::Seconds(std::uniform_int_distribution<int>(10, 20)(rng));
    absl::SleepFor(std::max(absl::ZeroDuration(), killed + next - absl::Now()));
  }
  const nlohmann::json summary = AwaitEnd(*launcher, summary_path);
  ASSERT_TRUE(summary.is_object()) << output_;
  EXPECT_GE(kills, 6);
  EXPECT_EQ(summary["recoveries"].size(), 0u) << summary.dump();
  EXPECT_GE(failover_kills, 1);
  ASSERT_EQ(summary["failovers"].size(), static_cast<size_t>(failover_kills)) << summary.dump();
  for (const nlohmann::json& failover : summary["failovers"]) {
    EXPECT_EQ(failover["steps_lost"], 0) << failover.dump();
  }
  EXPECT_GE(summary["resyncs"].size(), static_cast<size_t>(kills)) << summary.dump();
  for (const nlohmann::json& shard : summary["replication"]["shards"]) {
    EXPECT_EQ(shard["digests_match"], true) << shard.dump();
  }
  EXPECT_GE(summary["test_accuracy"].get<double>(), 0.75) << summary.dump();
  std::printf("%d kills in two minutes: %zu failovers, %zu resyncs, 0 restores\n", kills,
              summary["failovers"].size(), summary["resyncs"].size());
}

TEST_F(ReplicationTest, Plan_ShowsEachShardsCopies_AndOnePsIsRefused) {
  auto plan = TestProcess::Start({BinaryPath("pstrain"), "plan", "--ps=3", "--ps_replicas=2"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::optional<int> exited = (*plan)->WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 0) << (*plan)->output();
  const std::string out = (*plan)->output();
  EXPECT_NE(out.find("2 copies of each shard"), std::string::npos) << out;
  // Shard 2's backup wraps round to ps 0.
  EXPECT_NE(out.find("\n2             2        0"), std::string::npos) << out;

  auto one = TestProcess::Start({BinaryPath("pstrain"), "plan", "--ps=1", "--ps_replicas=2"});
  ASSERT_TRUE(one.ok()) << one.status();
  exited = (*one)->WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(exited.has_value());
  EXPECT_NE(ExitCode(*exited), 0);
  EXPECT_NE((*one)->output().find("at least 2"), std::string::npos) << (*one)->output();
}

}  // namespace
}  // namespace pst::testing
