// The evaluator task on real clusters (`pstrain local --evaluator`): every
// checkpoint the job saves is evaluated by the evaluator binary, reported
// to the chief (the summary JSON's "evaluations"), written to TensorBoard
// under eval/, and the best kept in <checkpoint_dir>/best; epochs drive
// checkpoints and evaluations as Keras users expect.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kTimeout = absl::Seconds(240);

class EvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST is missing: install Debian's dataset-fashion-mnist";
    }
    dir_ = TestDir();
    ckpt_ = dir_ + "/ckpt";
  }

  // Runs a job of 2 ps and 2 workers with `more` flags; its summary.
  nlohmann::json Run(const std::vector<std::string>& more, int* exit_code = nullptr) {
    const std::string summary = dir_ + "/summary.json";
    std::vector<std::string> flags = {"--ps=2", "--workers=2", "--summary_json=" + summary,
                                      "--checkpoint_dir=" + ckpt_, "--keep_checkpoints=50"};
    flags.insert(flags.end(), more.begin(), more.end());
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    EXPECT_NE(launcher, nullptr);
    if (launcher == nullptr) return {};
    std::optional<int> exited = launcher->WaitForExit(kTimeout);
    output_ = launcher->output();
    EXPECT_TRUE(exited.has_value()) << output_;
    const int code = exited.has_value() ? ExitCode(*exited) : -1;
    if (exit_code != nullptr) {
      *exit_code = code;
    } else {
      EXPECT_EQ(code, 0) << output_;
    }
    return ReadJsonFile(summary);
  }

  std::string dir_, ckpt_, output_;
};

TEST_F(EvaluatorTest, EveryCheckpointIsEvaluatedReportedAndTheBestKept) {
  const nlohmann::json summary =
      Run({"--evaluator", "--epochs=3", "--checkpoint_every_epochs=1",
           "--save_checkpoints_steps=700", "--summary_dir=" + dir_ + "/tb"});
  ASSERT_TRUE(summary.is_object()) << output_;
  ASSERT_TRUE(summary.contains("evaluations")) << summary.dump(1);

  // One evaluation per checkpoint saved, by the evaluator, in step order.
  std::set<std::string> saved;
  for (const std::string& path : common::ListCheckpoints(ckpt_)) {
    saved.insert(fs::path(path).filename().string());
  }
  ASSERT_GE(saved.size(), 3u) << output_;  // epochs 1 and 2, the final one, and by steps
  std::set<std::string> evaluated;
  int64_t last_step = -1;
  double best_accuracy = 0;
  std::string best_name;
  for (const nlohmann::json& e : summary["evaluations"]) {
    EXPECT_EQ(e["source"], "evaluator 0") << e.dump();
    ASSERT_TRUE(e.contains("metrics")) << e.dump();
    EXPECT_TRUE(evaluated.insert(e["checkpoint"].get<std::string>()).second) << e.dump();
    EXPECT_GT(e["global_step"].get<int64_t>(), last_step);
    last_step = e["global_step"].get<int64_t>();
    const double accuracy = e["metrics"]["test_accuracy"].get<double>();
    EXPECT_GT(accuracy, 0.5) << e.dump();
    if (accuracy > best_accuracy) {
      best_accuracy = accuracy;
      best_name = e["checkpoint"].get<std::string>();
    }
  }
  EXPECT_EQ(evaluated, saved) << summary["evaluations"].dump(1) << output_;

  // The final checkpoint holds what the chief evaluated at the end: the
  // evaluator, restoring it onto one ps, scores it the same.
  const nlohmann::json& final_eval = summary["evaluations"].back();
  EXPECT_EQ(final_eval["global_step"], summary["global_step"]);
  EXPECT_NEAR(final_eval["metrics"]["test_accuracy"].get<double>(),
              summary["test_accuracy"].get<double>(), 1e-9);
  EXPECT_EQ(final_eval["epochs_completed"], 3);

  // Epoch checkpoints say how many epochs every worker had completed.
  std::set<int> epochs;
  for (const std::string& path : common::ListCheckpoints(ckpt_)) {
    epochs.insert(common::ReadManifest(path)->epochs_completed());
  }
  EXPECT_TRUE(epochs.count(1) && epochs.count(2) && epochs.count(3)) << output_;

  // best/ is the most accurate one, whole, and named in the summary.
  std::string report;
  EXPECT_EQ(InspectCheckpoints(ckpt_ + "/best", &report), 0) << report;
  const nlohmann::json best = ReadJsonFile(ckpt_ + "/best/BEST.json");
  EXPECT_EQ(best["metric"], "test_accuracy") << best.dump();
  EXPECT_EQ(best["checkpoint"], best_name) << best.dump();
  EXPECT_EQ(summary["best_checkpoint"]["checkpoint"], best_name);

  // TensorBoard: the evaluator's own event file, under eval/.
  ASSERT_TRUE(fs::is_directory(dir_ + "/tb/eval")) << output_;
  EXPECT_FALSE(fs::is_empty(dir_ + "/tb/eval"));
  EXPECT_NE(output_.find("the evaluator(s) reported the final checkpoint"), std::string::npos)
      << output_;
}

// --checkpoint_every_epochs: the workers hold at the end of each epoch
// until the chief has saved it, so the checkpoint "after epoch k" holds
// exactly k epochs of every worker, in every mode (and says which epoch it
// closes). Fashion-MNIST's 60,000 examples, 30,000 a worker.
TEST_F(EvaluatorTest, EpochCheckpoints_AreCutAtTheEpochsEnd_AsyncAndSync) {
  for (const std::string mode : {"async", "sync"}) {
    SCOPED_TRACE(mode);
    fs::remove_all(ckpt_);
    const nlohmann::json summary =
        Run({"--epochs=3", "--checkpoint_every_epochs=1", "--mode=" + mode});
    ASSERT_TRUE(summary.is_object()) << output_;
    std::map<int, proto::CheckpointManifest> closing;  // by the epoch closed
    for (const std::string& path : common::ListCheckpoints(ckpt_)) {
      absl::StatusOr<proto::CheckpointManifest> manifest = common::ReadManifest(path);
      ASSERT_TRUE(manifest.ok()) << path;
      if (manifest->closes_epoch() > 0) closing[manifest->closes_epoch()] = *manifest;
    }
    ASSERT_EQ(closing.size(), 2u) << "epochs 1 and 2 (the job's end saves the third)\n"
                                  << output_;
    for (const auto& [epoch, manifest] : closing) {
      const int64_t batch = manifest.training().batch_size();
      const int64_t per_epoch = (30000 + batch - 1) / batch;  // each worker's batches
      EXPECT_EQ(manifest.epochs_completed(), epoch);
      ASSERT_EQ(manifest.worker_positions_size(), 2);
      for (int64_t position : manifest.worker_positions()) {
        EXPECT_LE(std::abs(position - epoch * per_epoch), per_epoch / 50)
            << "epoch " << epoch << ": a worker at data position " << position;
      }
      // Async: a step per batch of either worker; sync: a step per pair.
      const int64_t boundary = (mode == "async" ? 2 : 1) * epoch * per_epoch;
      EXPECT_LE(std::abs(manifest.global_step() - boundary), boundary / 50)
          << "epoch " << epoch << ": checkpoint at step " << manifest.global_step()
          << ", the epoch ends at step " << boundary;
    }
  }
}

// Killed with SIGKILL after its first evaluation and restarted
// (--restart_failed), the evaluator goes on after the checkpoints the chief
// has its reports of: every checkpoint is still evaluated, none twice.
TEST_F(EvaluatorTest, AKilledEvaluatorGoesOnWithoutEvaluatingAgain) {
  const std::string summary_path = dir_ + "/summary.json";
  std::unique_ptr<TestProcess> launcher =
      LaunchLocal({"--ps=2", "--workers=2", "--summary_json=" + summary_path,
                   "--checkpoint_dir=" + ckpt_, "--keep_checkpoints=50", "--evaluator",
                   "--restart_failed", "--epochs=3", "--save_checkpoints_steps=400"});
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("] evaluated ckpt-", kTimeout)) << launcher->output();
  const std::map<std::string, pid_t> pids = DaemonPids(launcher->output());
  ASSERT_TRUE(pids.count("evaluator:0")) << launcher->output();
  kill(pids.at("evaluator:0"), SIGKILL);
  std::optional<int> exited = launcher->WaitForExit(kTimeout);
  output_ = launcher->output();
  ASSERT_TRUE(exited.has_value()) << output_;
  ASSERT_EQ(ExitCode(*exited), 0) << output_;
  EXPECT_NE(output_.find("evaluator:0 killed by signal 9"), std::string::npos) << output_;
  EXPECT_NE(output_.find("going on after that checkpoint"), std::string::npos) << output_;
  const nlohmann::json summary = ReadJsonFile(summary_path);
  std::set<std::string> saved, evaluated;
  for (const std::string& path : common::ListCheckpoints(ckpt_)) {
    saved.insert(fs::path(path).filename().string());
  }
  for (const nlohmann::json& e : summary["evaluations"]) {
    EXPECT_TRUE(evaluated.insert(e["checkpoint"].get<std::string>()).second)
        << "evaluated twice: " << e.dump() << "\n"
        << output_;
  }
  EXPECT_EQ(evaluated, saved) << summary["evaluations"].dump(1) << output_;
}

TEST_F(EvaluatorTest, WithoutAnEvaluatorTheChiefEvaluatesEveryEpoch) {
  const nlohmann::json summary = Run({"--epochs=3", "--eval_every_epochs=1"});
  ASSERT_TRUE(summary.is_object()) << output_;
  std::set<int> epochs;
  for (const nlohmann::json& e : summary["evaluations"]) {
    EXPECT_EQ(e["source"], "chief") << e.dump();
    EXPECT_GT(e["metrics"]["test_accuracy"].get<double>(), 0.5) << e.dump();
    epochs.insert(e["epochs_completed"].get<int>());
  }
  // After epochs 1 and 2; the end of epoch 3 is the job's final evaluation.
  EXPECT_EQ(epochs, (std::set<int>{1, 2})) << summary["evaluations"].dump(1);
}

TEST_F(EvaluatorTest, AnEvaluatorNeedsACheckpointDirectory) {
  const std::string summary = dir_ + "/summary.json";
  std::unique_ptr<TestProcess> launcher =
      LaunchLocal({"--ps=1", "--workers=1", "--evaluator", "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_NE(ExitCode(*exited), 0);
  // The chief and the evaluator both refuse to start, each saying why;
  // whichever exits first ends the job, so either reason may be the one
  // printed.
  const std::string output = launcher->output();
  EXPECT_TRUE(output.find("give the chief --checkpoint_dir") != std::string::npos ||
              output.find("an evaluator needs --checkpoint_dir") != std::string::npos)
      << output;
}

}  // namespace
}  // namespace pst::testing
