// The disk tier of hash tables in a real job (issue 32): `pstrain local`
// trains wide_deep with hash embeddings in sync mode with one worker, once
// with every row in memory and once with --table_capacity a quarter of the
// rows and --table_store_dir. Both end with the same parameters and
// optimizer slots, bit for bit (their exported checkpoints hold the same
// tensors). A ps killed with kill -9 mid-job, with most of its rows on
// disk, is restored from the checkpoint, and the job still ends bit for bit
// as the one without the fault; with --ps_replicas=2, its backup takes
// over instead, and the job ends bit for bit too.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr int64_t kRows = 12000;
constexpr absl::Duration kTimeout = absl::Seconds(150);

// A safetensors file's tensors, without the metadata that names the
// checkpoint: its header's tensor entries, and its data.
struct Tensors {
  nlohmann::json header;
  std::string data;
};

Tensors ReadTensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  const std::string bytes = all.str();
  Tensors t;
  if (bytes.size() < 8) return t;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian, as this machine
  if (8 + n > bytes.size()) return t;
  t.header = nlohmann::json::parse(bytes.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (t.header.is_object()) t.header.erase("__metadata__");
  t.data = bytes.substr(8 + n);
  return t;
}

class TableStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    data_ = dir_ + "/criteo.tsv";
    const Outcome gen =
        RunToExit({BinaryPath("pstrain"), "generate_criteo", "--out=" + data_,
                   absl::StrCat("--rows=", kRows), "--vocab=400", "--churn=2", "--seed=11"});
    ASSERT_EQ(gen.exit_code, 0) << gen.output;
  }

  std::vector<std::string> Flags(const std::string& name) const {
    // 2 epochs of 188 steps, a save every 40: the kill test's ps dies
    // well before the end.
    return {"--model=wide_deep",
            "--buckets_per_field=0",
            "--epochs=2",
            "--batch_size=64",
            "--learning_rate=0.01",
            "--optimizer=adam",
            "--seed=3",
            "--ps=2",
            "--workers=1",
            "--mode=sync",
            "--restart_failed",
            "--save_checkpoints_steps=40",
            "--checkpoint_dir=" + dir_ + "/" + name,
            "--data=" + data_,
            "--summary_json=" + dir_ + "/" + name + ".json"};
  }

  // Waits for the job `launcher` runs; its summary.
  nlohmann::json Finish(TestProcess* launcher, const std::string& name) {
    std::optional<int> exited = launcher->WaitForExit(kTimeout);
    EXPECT_TRUE(exited.has_value()) << launcher->output();
    EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << launcher->output();
    output_ = launcher->output();
    return ReadJsonFile(dir_ + "/" + name + ".json");
  }

  nlohmann::json Run(const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> flags = Flags(name);
    flags.insert(flags.end(), extra.begin(), extra.end());
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    EXPECT_NE(launcher, nullptr);
    if (launcher == nullptr) return {};
    return Finish(launcher.get(), name);
  }

  // The job `name`'s final checkpoint, every tensor and slot.
  Tensors Exported(const std::string& name) {
    const std::string out = dir_ + "/" + name + ".safetensors";
    const Outcome exported = RunToExit({BinaryPath("pstrain"), "checkpoint", "export",
                                        "--include_slots", dir_ + "/" + name, out});
    EXPECT_EQ(exported.exit_code, 0) << exported.output;
    return ReadTensors(out);
  }

  // The disk tier's flags, a quarter of the rows of the in-memory job's
  // fullest table partition in memory.
  std::vector<std::string> DiskFlags(const nlohmann::json& in_memory) {
    int64_t most = 0;
    for (const auto& rows : in_memory["hash_rows_per_ps"]) {
      most = std::max(most, rows.get<int64_t>());
    }
    // 2 tables a ps (wide and deep embeddings), about even.
    capacity_ = most / 2 / 4;
    EXPECT_GT(capacity_, 100) << in_memory.dump();
    return {absl::StrCat("--table_capacity=", capacity_), "--table_eviction=lru",
            "--table_store_dir=" + dir_ + "/tables"};
  }

  // Starts the job `name` with the disk tier sized from `in_memory` and
  // `extra` flags.
  std::unique_ptr<TestProcess> LaunchTiered(const std::string& name,
                                            const nlohmann::json& in_memory,
                                            const std::vector<std::string>& extra) {
    std::vector<std::string> flags = Flags(name);
    const std::vector<std::string> disk = DiskFlags(in_memory);
    flags.insert(flags.end(), disk.begin(), disk.end());
    flags.insert(flags.end(), extra.begin(), extra.end());
    return LaunchLocal(flags);
  }

  // Kills ps:1 of the job `launcher` runs with SIGKILL.
  static void KillPs1(TestProcess* launcher) {
    const std::map<std::string, pid_t> pids = DaemonPids(launcher->output());
    ASSERT_EQ(pids.count("ps:1"), 1u) << launcher->output();
    ASSERT_EQ(kill(pids.at("ps:1"), SIGKILL), 0);
  }

  // The final checkpoints of jobs `a` and `b` hold the same tensors and
  // slots, bit for bit.
  void ExpectSameParameters(const std::string& a_name, const std::string& b_name) {
    const Tensors a = Exported(a_name), b = Exported(b_name);
    ASSERT_TRUE(a.header.is_object());
    EXPECT_EQ(a.header, b.header);
    EXPECT_GT(a.data.size(), 0u);
    EXPECT_TRUE(a.data == b.data) << "the parameters or slots differ";
  }

  // Every ps serving a shard (a ps left with backups only counts none).
  void ExpectMostRowsOnDisk(const nlohmann::json& summary) {
    ASSERT_TRUE(summary.contains("table_rows_on_disk_per_ps")) << summary.dump();
    int serving = 0;
    for (size_t ps = 0; ps < summary["hash_rows_per_ps"].size(); ++ps) {
      const int64_t memory = summary["hash_rows_per_ps"][ps].get<int64_t>();
      const int64_t disk = summary["table_rows_on_disk_per_ps"][ps].get<int64_t>();
      if (memory == 0 && disk == 0) continue;
      ++serving;
      EXPECT_LE(memory, 2 * capacity_) << "ps " << ps;
      EXPECT_GT(disk, 2 * memory) << "ps " << ps << ": most rows on disk";
    }
    EXPECT_GE(serving, 1) << summary.dump();
  }

  std::string dir_, data_, output_;
  int64_t capacity_ = 0;
};

TEST_F(TableStoreTest, QuarterOfTheRowsInMemory_EndsBitForBitAsEveryRowInMemory) {
  const nlohmann::json in_memory = Run("memory", {});
  ASSERT_TRUE(in_memory.contains("hash_rows_per_ps")) << output_;
  const nlohmann::json tiered = Run("tiered", DiskFlags(in_memory));
  ASSERT_TRUE(tiered.contains("global_step")) << output_;
  EXPECT_EQ(tiered["global_step"], in_memory["global_step"]);
  ExpectMostRowsOnDisk(tiered);
  EXPECT_NE(output_.find("on disk; rows evicted per ps"), std::string::npos) << output_;

  ExpectSameParameters("memory", "tiered");
}

TEST_F(TableStoreTest, PsKilledWithRowsOnDisk_IsRestored_AndTheJobEndsBitForBitAsWithoutIt) {
  const nlohmann::json in_memory = Run("memory", {});
  ASSERT_TRUE(in_memory.contains("hash_rows_per_ps")) << output_;
  std::unique_ptr<TestProcess> launcher = LaunchTiered("killed", in_memory, {});
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("saved checkpoint", kTimeout)) << launcher->output();
  ASSERT_NO_FATAL_FAILURE(KillPs1(launcher.get()));
  const nlohmann::json summary = Finish(launcher.get(), "killed");
  ASSERT_TRUE(summary.contains("recoveries")) << output_;
  ASSERT_GE(summary["recoveries"].size(), 1u) << output_;
  EXPECT_EQ(summary["global_step"], in_memory["global_step"]);
  ExpectMostRowsOnDisk(summary);
  ExpectSameParameters("memory", "killed");
}

// With --ps_replicas=2 each ps also holds the backup of the other's shard,
// its rows past the capacity on disk too (one tier per ps for both copies).
// The primary of shard 1 is killed with kill -9: its backup on ps 0 takes
// over with no restore, the restarted ps 1 is sent its shard again (rows
// from disk included) and becomes its backup, and the job ends bit for bit
// as the one with every row in memory and no replication.
TEST_F(TableStoreTest, PrimaryKilledWithRowsOnDisk_BackupTakesOver_EndsBitForBit) {
  const nlohmann::json in_memory = Run("memory", {});
  ASSERT_TRUE(in_memory.contains("hash_rows_per_ps")) << output_;
  std::unique_ptr<TestProcess> launcher =
      LaunchTiered("failover", in_memory, {"--ps_replicas=2", "--peer_timeout_s=5"});
  ASSERT_NE(launcher, nullptr);
  // Training, every backup in sync, and rows already evicted to disk.
  ASSERT_TRUE(launcher->WaitForOutput("backups 2/2 in sync", kTimeout)) << launcher->output();
  ASSERT_TRUE(launcher->WaitForOutput("saved checkpoint", kTimeout)) << launcher->output();
  ASSERT_NO_FATAL_FAILURE(KillPs1(launcher.get()));
  const nlohmann::json summary = Finish(launcher.get(), "failover");
  ASSERT_TRUE(summary.contains("failovers")) << output_;
  EXPECT_EQ(summary["failovers"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["recoveries"].size(), 0u) << "no restore: " << summary.dump();
  EXPECT_EQ(summary["global_step"], in_memory["global_step"]);
  ExpectMostRowsOnDisk(summary);
  for (const nlohmann::json& shard : summary["replication"]["shards"]) {
    EXPECT_EQ(shard["in_sync"], true) << shard.dump();
    EXPECT_EQ(shard["digests_match"], true) << shard.dump();
  }
  ExpectSameParameters("memory", "failover");
}

TEST_F(TableStoreTest, UnwritableStoreDir_ThePsExitsNamingIt) {
  const std::string file = dir_ + "/not_a_directory";
  std::ofstream(file) << "x";
  const Outcome ps = RunToExit({BinaryPath("ps_server"), "--tf_config=" +
                                    TfConfigJson(PickLocalSpec(0, 1, 1), "ps", 0),
                                "--table_store_dir=" + file});
  EXPECT_EQ(ps.exit_code, 2) << ps.output;
  EXPECT_NE(ps.output.find("--table_store_dir"), std::string::npos) << ps.output;
  EXPECT_NE(ps.output.find(file), std::string::npos) << ps.output;
}

}  // namespace
}  // namespace pst::testing
