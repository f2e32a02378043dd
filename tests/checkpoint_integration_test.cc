// Sharded checkpoints on real clusters: saved while training, checked by
// `pstrain checkpoint inspect`, resumed onto another number of ps, a
// corrupt newest checkpoint skipped for the next older one, and another
// model's checkpoints refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(240);

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST is missing: install Debian's dataset-fashion-mnist";
    }
    dir_ = TestDir();
    ckpt_ = dir_ + "/ckpt";
  }

  // Runs a job; returns its summary and keeps its output.
  nlohmann::json Run(int ps, int64_t max_steps, const std::vector<std::string>& more = {}) {
    const std::string summary = absl::StrCat(dir_, "/summary_", max_steps, ".json");
    std::vector<std::string> flags = {absl::StrCat("--ps=", ps),
                                      "--workers=2",
                                      "--epochs=20",
                                      absl::StrCat("--max_steps=", max_steps),
                                      "--checkpoint_dir=" + ckpt_,
                                      "--save_checkpoints_steps=50",
                                      "--summary_json=" + summary};
    flags.insert(flags.end(), more.begin(), more.end());
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    EXPECT_NE(launcher, nullptr);
    if (launcher == nullptr) return {};
    std::optional<int> exited = launcher->WaitForExit(kTimeout);
    output_ = launcher->output();
    EXPECT_TRUE(exited.has_value()) << output_;
    EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << output_;
    return ReadJsonFile(summary);
  }

  // `pstrain checkpoint inspect` on the root: its exit code.
  int Inspect(std::string* output) { return InspectCheckpoints(ckpt_, output); }

  std::string dir_, ckpt_, output_;
};

// The chief looks at the global step at every heartbeat (200 ms here) and
// saves once --save_checkpoints_steps (50) more have passed, so a first job
// must last several heartbeats to leave two checkpoints: 1500 steps take a
// few seconds, where 200 took less than one heartbeat.
constexpr int64_t kFirstSteps = 1500;
constexpr int64_t kSecondSteps = 2000;

TEST_F(CheckpointTest, SavedWhileTraining_ResumesOntoThreePs) {
  const nlohmann::json first = Run(/*ps=*/2, kFirstSteps);
  ASSERT_TRUE(first.is_object()) << output_;
  const std::vector<std::string> saved = common::ListCheckpoints(ckpt_);
  ASSERT_GE(saved.size(), 2u) << output_;
  std::string report;
  EXPECT_EQ(Inspect(&report), 0) << report;
  EXPECT_NE(report.find("checksums OK"), std::string::npos) << report;
  const int64_t newest = common::ReadManifest(saved[0])->global_step();
  EXPECT_GE(newest, kFirstSteps);

  const nlohmann::json second = Run(/*ps=*/3, kSecondSteps);
  ASSERT_TRUE(second.is_object()) << output_;
  EXPECT_NE(output_.find(absl::StrCat("restored from ", saved[0])), std::string::npos) << output_;
  EXPECT_NE(output_.find("written by 2 ps, loaded onto 3"), std::string::npos) << output_;
  EXPECT_GE(second["global_step"].get<int64_t>(), kSecondSteps);
  // It went on from the checkpoint: far fewer than kSecondSteps new pushes.
  EXPECT_LE(second["pushes"].get<int64_t>(), kSecondSteps - newest + 20) << second.dump();
  EXPECT_EQ(Inspect(&report), 0) << report;
}

// Incremental saves between no full ones: the first save is full, the
// others links of its chain, and the final save full (a chain of its own;
// two chains kept). `pstrain checkpoint inspect` checks each link's chain.
// With the final one gone, a job onto three ps restores the newest link,
// reading its chain over gRPC.
TEST_F(CheckpointTest, IncrementalChain_InspectedAndResumedOntoThreePs) {
  const nlohmann::json first =
      Run(/*ps=*/2, kFirstSteps,
          {"--save_checkpoints_steps=0", "--incremental_save_steps=50", "--keep_checkpoints=2"});
  ASSERT_TRUE(first.is_object()) << output_;
  int incremental = 0;
  for (const auto& save : first["saves"]) incremental += save["incremental"].get<bool>() ? 1 : 0;
  EXPECT_GE(incremental, 1) << first["saves"].dump();
  const std::vector<std::string> saved = common::ListCheckpoints(ckpt_);
  ASSERT_GE(saved.size(), 3u) << output_;
  EXPECT_TRUE(common::ReadManifest(saved[0])->base().empty()) << "the final save is full";
  const std::string link = saved[1];
  const std::string base = common::ReadManifest(link)->base();
  ASSERT_FALSE(base.empty()) << link << " is a link of the first chain";
  std::string report;
  EXPECT_EQ(Inspect(&report), 0) << report;
  EXPECT_NE(report.find("incremental on " + base), std::string::npos) << report;

  std::filesystem::remove_all(saved[0]);
  const nlohmann::json second = Run(/*ps=*/3, kSecondSteps);
  ASSERT_TRUE(second.is_object()) << output_;
  EXPECT_NE(output_.find(absl::StrCat("restored from ", link)), std::string::npos) << output_;
  EXPECT_NE(output_.find("loaded onto 3; an incremental one, a chain of"), std::string::npos)
      << output_;
  EXPECT_GE(second["global_step"].get<int64_t>(), kSecondSteps);
}

// Optimizer groups on a real cluster: wide & deep with Adagrad on its
// tables and Adam on its dense layers. The checkpoint names each variable's
// slots by its own optimizer, restores onto three ps, and a job that would
// train the tables with FTRL is refused, naming a table, unless it resets
// their slots.
TEST_F(CheckpointTest, OptimizerGroups_AdagradTablesAdamDense_ResumeOntoThreePs) {
  const std::vector<std::string> wide_deep = {"--model=wide_deep", "--data=generate:rows=6000",
                                              "--batch_size=32", "--table_optimizer=adagrad",
                                              "--table_learning_rate=0.05"};
  const nlohmann::json first = Run(/*ps=*/2, 300, wide_deep);
  ASSERT_TRUE(first.is_object()) << output_;
  const std::string out = dir_ + "/groups.safetensors";
  const Outcome exported =
      RunToExit({BinaryPath("pstrain"), "checkpoint", "export", "--include_slots", ckpt_, out});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::string header(4096, '\0');
  std::ifstream(out, std::ios::binary)
      .read(header.data(), static_cast<std::streamsize>(header.size()));
  for (const char* tensor : {"\"deep/embedding/accum\"", "\"wide/embedding/accum\"",
                             "\"deep/dense_0/kernel/m\"", "\"deep/dense_0/kernel/v\""}) {
    EXPECT_NE(header.find(tensor), std::string::npos) << tensor << " in " << header;
  }
  EXPECT_EQ(header.find("deep/embedding/m"), std::string::npos) << header;

  const nlohmann::json second = Run(/*ps=*/3, 600, wide_deep);
  ASSERT_TRUE(second.is_object()) << output_;
  EXPECT_NE(output_.find("written by 2 ps, loaded onto 3"), std::string::npos) << output_;

  std::vector<std::string> ftrl = wide_deep;
  ftrl[3] = "--table_optimizer=ftrl";
  std::vector<std::string> flags = {"--ps=2", "--workers=2", "--epochs=20", "--max_steps=900",
                                    "--checkpoint_dir=" + ckpt_};
  flags.insert(flags.end(), ftrl.begin(), ftrl.end());
  const Outcome refused = Finish(LaunchLocal(flags), absl::Now(), kTimeout);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("was saved with adagrad (tensorflow form; slots accum) but "
                                "trains with ftrl (tensorflow form; slots accum, linear)"),
            std::string::npos)
      << refused.output;
  const nlohmann::json reset = Run(/*ps=*/2, 900, [&] {
    std::vector<std::string> more = ftrl;
    more.push_back("--reset_slots");
    return more;
  }());
  ASSERT_TRUE(reset.is_object()) << output_;
  EXPECT_GE(reset["global_step"].get<int64_t>(), 900);
}

// Flips one byte in the middle of `path`.
void FlipAByte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(0, std::ios::end);
  const std::streamoff middle = f.tellg() / 2;
  f.seekg(middle);
  char byte = 0;
  f.read(&byte, 1);
  byte ^= 0x10;
  f.seekp(middle);
  f.write(&byte, 1);
}

TEST_F(CheckpointTest, CorruptNewestCheckpoint_IsReportedAndTheOlderOneUsed) {
  ASSERT_TRUE(Run(/*ps=*/2, kFirstSteps).is_object()) << output_;
  const std::vector<std::string> saved = common::ListCheckpoints(ckpt_);
  ASSERT_GE(saved.size(), 2u) << output_;
  const std::string shard = saved[0] + "/" + common::ShardFileName(0, 2);
  FlipAByte(shard);
  std::string report;
  EXPECT_EQ(Inspect(&report), 1) << report;
  EXPECT_NE(report.find("CORRUPT"), std::string::npos) << report;
  EXPECT_NE(report.find(shard), std::string::npos) << report;

  ASSERT_TRUE(Run(/*ps=*/2, kSecondSteps).is_object()) << output_;
  EXPECT_NE(output_.find(absl::StrCat("checkpoint ", saved[0], " is unusable")), std::string::npos)
      << output_;
  EXPECT_NE(output_.find(absl::StrCat("restored from ", saved[1])), std::string::npos) << output_;
}

// The newest checkpoint is corrupt and of a step the next job will not
// reach; that job, keeping one checkpoint, falls back to an older one, saves
// and prunes: its own verified save must survive every prune, so a valid
// checkpoint remains (retention once kept the newest by step, the corrupt
// one, and deleted the good save).
TEST_F(CheckpointTest, CorruptNewestWithKeepOne_FallBackSaveAndPrune_LeaveAValidCheckpoint) {
  ASSERT_TRUE(Run(/*ps=*/2, kFirstSteps).is_object()) << output_;
  const std::vector<std::string> saved = common::ListCheckpoints(ckpt_);
  ASSERT_GE(saved.size(), 1u) << output_;
  // A copy of the newest at a step far ahead, one shard byte flipped.
  absl::StatusOr<proto::CheckpointManifest> manifest = common::ReadManifest(saved[0]);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const int64_t far_step = manifest->global_step() + 1000000;
  const std::string corrupt = ckpt_ + "/" + common::CheckpointDirName(far_step);
  std::filesystem::copy(saved[0], corrupt);
  manifest->set_global_step(far_step);
  ASSERT_TRUE(common::WriteManifest(corrupt, *manifest).ok());
  FlipAByte(corrupt + "/" + common::ShardFileName(0, 2));
  ASSERT_FALSE(common::InspectCheckpoint(corrupt).ok());
  ASSERT_EQ(common::ListCheckpoints(ckpt_)[0], corrupt);

  ASSERT_TRUE(Run(/*ps=*/2, kSecondSteps, {"--keep_checkpoints=1"}).is_object()) << output_;
  EXPECT_NE(output_.find(absl::StrCat("checkpoint ", corrupt, " is unusable")), std::string::npos)
      << output_;
  EXPECT_NE(output_.find(absl::StrCat("restored from ", saved[0])), std::string::npos) << output_;
  int64_t newest_valid = -1;
  for (const std::string& dir : common::ListCheckpoints(ckpt_)) {
    absl::StatusOr<common::CheckpointReport> checked = common::InspectCheckpoint(dir);
    if (checked.ok()) newest_valid = std::max(newest_valid, checked->global_step);
  }
  EXPECT_GE(newest_valid, kSecondSteps) << output_;
}

// A job on a directory that holds another model's checkpoints (an MLP of
// another width) fails at once, saying so, and leaves them as they were.
TEST_F(CheckpointTest, CheckpointsOfAnotherModel_FailTheJobSayingSo) {
  ASSERT_TRUE(Run(/*ps=*/2, /*max_steps=*/100, {"--hidden=32"}).is_object()) << output_;
  const std::vector<std::string> saved = common::ListCheckpoints(ckpt_);
  ASSERT_FALSE(saved.empty()) << output_;

  std::unique_ptr<TestProcess> launcher = LaunchLocal(
      {"--ps=2", "--workers=2", "--epochs=1", "--hidden=64", "--checkpoint_dir=" + ckpt_});
  ASSERT_NE(launcher, nullptr);
  const std::optional<int> exited = launcher->WaitForExit(kTimeout);
  const std::string output = launcher->output();
  ASSERT_TRUE(exited.has_value()) << output;
  EXPECT_NE(ExitCode(*exited), 0) << output;
  EXPECT_NE(output.find(absl::StrCat(
                ckpt_, " holds checkpoints of another model (",
                std::filesystem::path(saved[0]).filename().string(),
                ": its 'dense_0/kernel' has shape [784, 32], this job's [784, 64]): use another "
                "--checkpoint_dir or empty it")),
            std::string::npos)
      << output;
  EXPECT_EQ(common::ListCheckpoints(ckpt_), saved);
}

// A job run again on the checkpoints of its finished self has nothing left
// to train: it ends at once, and its last progress line says so (the final
// step, every epoch). The first run's first save comes at the chief's first
// look at the ps: it has no pushes "between saves" to compare with yet.
TEST_F(CheckpointTest, FinishedJobRunAgain_EndsAtOnce_ItsLastLineShowsTheEnd) {
  const std::vector<std::string> flags = {"--ps=2", "--workers=2", "--epochs=2",
                                          "--checkpoint_dir=" + ckpt_,
                                          "--save_checkpoints_secs=1"};
  std::string outputs[2];
  for (std::string& output : outputs) {
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    ASSERT_NE(launcher, nullptr);
    const std::optional<int> exited = launcher->WaitForExit(kTimeout);
    output = launcher->output();
    ASSERT_TRUE(exited.has_value()) << output;
    ASSERT_EQ(ExitCode(*exited), 0) << output;
  }
  EXPECT_EQ(outputs[0].find("between saves: 0 pushes/s"), std::string::npos) << outputs[0];
  // Fashion-MNIST, 2 workers of 469 batches an epoch: 1876 steps in 2 epochs.
  for (const std::string& output : outputs) {
    const size_t done = output.rfind(" | workers 2/2 done");
    ASSERT_NE(done, std::string::npos) << output;
    const std::string last = output.substr(output.rfind('\n', done) + 1,
                                           done - output.rfind('\n', done));
    EXPECT_NE(last.find("step 1876/1876 | epoch 2/2 |"), std::string::npos) << last;
  }
  EXPECT_NE(outputs[1].find("restored from "), std::string::npos) << outputs[1];
}

}  // namespace
}  // namespace pst::testing
