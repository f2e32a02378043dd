// Training modes on real clusters (`pstrain local`, Fashion-MNIST, 2 ps and
// 3 workers): every mode trains to 0.85; an artificially slow worker holds
// back neither sync with a backup worker nor async, and holds ssp to its
// staleness bound; a worker that leaves a sync job lowers the quorum instead
// of hanging the others; bf16 on the wire trains the demo to its accuracy.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kJobTimeout = absl::Seconds(240);

class ModesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) {
      GTEST_SKIP() << kFashionMnistDir << " is missing: install Debian's dataset-fashion-mnist";
    }
    dir_ = TestDir();
  }

  // Runs a job to the end; returns its summary, with the launcher's output
  // kept in output_.
  nlohmann::json RunJob(std::vector<std::string> flags) {
    const std::string summary = dir_ + "/summary.json";
    flags.insert(flags.begin(), {"--ps=2", "--workers=3", "--summary_json=" + summary});
    std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
    EXPECT_NE(launcher, nullptr);
    if (launcher == nullptr) return {};
    std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
    output_ = launcher->output();
    EXPECT_TRUE(exited.has_value()) << output_;
    EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << output_;
    return ReadJsonFile(summary);
  }

  // Steps worker `index` reported making when it finished.
  int64_t WorkerSteps(int index) const {
    std::smatch m;
    const std::regex re(absl::StrCat(R"(worker:)", index, R"(\] worker finished: (\d+) step)"));
    return std::regex_search(output_, m, re) ? std::stoll(m[1]) : -1;
  }

  std::string dir_, output_;
};

struct ModeCase {
  const char* mode;
  const char* learning_rate;  // sync averages 3 gradients: a 3x batch, a larger step
};

class EveryModeTest : public ModesTest, public ::testing::WithParamInterface<ModeCase> {};

TEST_P(EveryModeTest, TwoPsThreeWorkers_ReachEightyFivePercent) {
  const nlohmann::json result =
      RunJob({absl::StrCat("--mode=", GetParam().mode), "--epochs=5",
              absl::StrCat("--learning_rate=", GetParam().learning_rate)});
  ASSERT_TRUE(result.is_object()) << output_;
  std::printf(
      "mode %s: accuracy %.4f, %.0f examples/s, staleness mean %.2f max %lld, "
      "%.1f s at barriers\n",
      GetParam().mode, result["test_accuracy"].get<double>(),
      result["examples_per_sec"].get<double>(), result["staleness_mean"].get<double>(),
      static_cast<long long>(result["staleness_max"].get<int64_t>()),
      result["barrier_wait_seconds"].get<double>());
  EXPECT_EQ(result["mode"], GetParam().mode);
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.85) << result.dump();
  if (std::string(GetParam().mode) == "sync") {
    EXPECT_EQ(result["staleness_max"].get<int64_t>(), 0) << "sync applies only fresh gradients";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EveryModeTest,
                         ::testing::Values(ModeCase{"async", "0.001"}, ModeCase{"sync", "0.002"},
                                           ModeCase{"ssp", "0.001"}),
                         [](const auto& info) { return std::string(info.param.mode); });

// Worker 2 takes 1.5 s a step; the others take milliseconds.
const std::vector<std::string> kSlowWorker = {"--slow_worker=2", "--slow_worker_delay_ms=1500"};

TEST_F(ModesTest, SyncWithBackupWorker_DoesNotWaitForTheSlowOne) {
  std::vector<std::string> flags = {"--mode=sync", "--replicas_to_aggregate=2", "--max_steps=100"};
  flags.insert(flags.end(), kSlowWorker.begin(), kSlowWorker.end());
  const nlohmann::json result = RunJob(flags);
  ASSERT_TRUE(result.is_object()) << output_;
  EXPECT_GE(result["global_step"].get<int64_t>(), 100);
  // Had the steps waited for worker 2, it would have pushed once per step.
  const int64_t slow = WorkerSteps(2);
  EXPECT_GE(slow, 1) << output_;
  EXPECT_LT(slow, 20) << output_;
  EXPECT_GE(WorkerSteps(0) + WorkerSteps(1), 2 * 100 - 40) << output_;
  EXPECT_EQ(result["staleness_max"].get<int64_t>(), 0);
}

TEST_F(ModesTest, Ssp_NeverLetsAWorkerRunMoreThanStalenessAhead) {
  std::vector<std::string> flags = {"--mode=ssp", "--staleness=2", "--max_steps=60",
                                    "--slow_worker=2", "--slow_worker_delay_ms=100"};
  const nlohmann::json result = RunJob(flags);
  ASSERT_TRUE(result.is_object()) << output_;
  EXPECT_LE(result["max_clock_gap"].get<int64_t>(), 2) << result.dump();
  // The bound was exercised: fast workers waited for the slow one.
  EXPECT_GT(result["barrier_wait_seconds"].get<double>(), 0.0) << result.dump();
  // And nobody got more than staleness + 1 pushes ahead of worker 2 overall.
  const int64_t slow = WorkerSteps(2);
  for (int w : {0, 1}) EXPECT_LE(WorkerSteps(w), slow + 2 + 1) << output_;
}

TEST_F(ModesTest, Async_IsNeverBlockedBySlowWorker) {
  std::vector<std::string> flags = {"--mode=async", "--max_steps=300"};
  flags.insert(flags.end(), kSlowWorker.begin(), kSlowWorker.end());
  const nlohmann::json result = RunJob(flags);
  ASSERT_TRUE(result.is_object()) << output_;
  EXPECT_EQ(result["barrier_wait_seconds"].get<double>(), 0.0) << result.dump();
  EXPECT_LT(WorkerSteps(2), 20) << output_;
  EXPECT_GE(WorkerSteps(0) + WorkerSteps(1), 300 - 20) << output_;
}

// Two workers' gradients sum the same in either order, so a sync job is
// deterministic: cutting its dense variables into pieces (spread over both
// ps, pushed in several requests per step) must not change a single bit.
TEST_F(ModesTest, SyncWithDenseVariablesCutIntoPieces_TrainsExactlyAsWhole) {
  const std::vector<std::string> job = {"--mode=sync", "--workers=2", "--max_steps=150"};
  std::vector<std::string> whole_flags = job, cut_flags = job;
  whole_flags.push_back("--dense_piece_bytes=0");
  cut_flags.push_back("--dense_piece_bytes=16384");
  const nlohmann::json whole = RunJob(whole_flags);
  ASSERT_TRUE(whole.is_object()) << output_;
  std::smatch placed;
  const std::regex placement(R"(placement \(\w+\): (\d+) variable)");
  ASSERT_TRUE(std::regex_search(output_, placed, placement));
  const int whole_variables = std::stoi(placed[1]);
  const nlohmann::json cut = RunJob(cut_flags);
  ASSERT_TRUE(cut.is_object()) << output_;
  ASSERT_TRUE(std::regex_search(output_, placed, placement));
  EXPECT_GT(std::stoi(placed[1]), whole_variables + 20) << "the first layer is cut into pieces";
  EXPECT_EQ(cut["global_step"], whole["global_step"]);
  ASSERT_TRUE(whole["test_loss"].is_number()) << whole.dump();
  EXPECT_EQ(cut["test_accuracy"], whole["test_accuracy"]);
  EXPECT_EQ(cut["test_loss"], whole["test_loss"]);
}

// --overlap: every worker pushes each batch once, and reports how its step
// time splits between compute and push+pull.
TEST_F(ModesTest, AsyncWithOverlap_TrainsEveryBatchAndReportsStepTimes) {
  const nlohmann::json result = RunJob({"--mode=async", "--overlap", "--workers=2", "--epochs=1"});
  ASSERT_TRUE(result.is_object()) << output_;
  EXPECT_EQ(result["global_step"], 2 * ((30000 + 63) / 64)) << "each worker's 469 batches, once";
  const std::regex times(
      R"(worker:\d\] time per step: compute ([\d.]+) ms, push\+pull ([\d.]+) ms )"
      R"(\(([\d.]+) ms of it not hidden by compute\); compute/communication ([\d.]+) )"
      R"(\(overlapped\))");
  auto lines = std::sregex_iterator(output_.begin(), output_.end(), times);
  ASSERT_EQ(std::distance(lines, std::sregex_iterator()), 2) << output_;
  for (auto it = lines; it != std::sregex_iterator(); ++it) {
    EXPECT_GT(std::stod((*it)[1]), 0) << it->str();
    EXPECT_GT(std::stod((*it)[2]), 0) << it->str();
  }
}

// Each worker's "dense payload per step: X kB pushed" figures. (The float32
// references below run in sync, where every step has a push of each worker:
// in a short async job one worker may finish every step before the other
// starts.)
std::vector<double> PushedKbPerStep(const std::string& output, const std::string& dtype) {
  const std::regex line(R"(dense payload per step: ([\d.]+) kB pushed, [\d.]+ kB pulled, in )" +
                        dtype);
  std::vector<double> kb;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    kb.push_back(std::stod((*it)[1]));
  }
  return kb;
}

// --wire_dtype=bf16: the demo (2 ps, 2 workers, 3 epochs) reaches its
// accuracy with half the dense payload of a float32 job, in async and in
// sync (whose answers wait for the quorum, then go out in bf16).
TEST_F(ModesTest, WireBf16_DemoReachesItsAccuracy_WithHalfThePayload) {
  const nlohmann::json result = RunJob({"--workers=2", "--epochs=3", "--wire_dtype=bf16"});
  ASSERT_TRUE(result.is_object()) << output_;
  std::printf("bf16 on the wire: accuracy %.4f, %.0f examples/s\n",
              result["test_accuracy"].get<double>(), result["examples_per_sec"].get<double>());
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.86) << result.dump();
  const std::vector<double> bf16 = PushedKbPerStep(output_, "bf16");
  ASSERT_EQ(bf16.size(), 2u) << output_;

  ASSERT_TRUE(RunJob({"--workers=2", "--mode=sync", "--max_steps=50"}).is_object()) << output_;
  const std::vector<double> float32 = PushedKbPerStep(output_, "float32");
  ASSERT_EQ(float32.size(), 2u) << output_;
  for (int w = 0; w < 2; ++w) {
    EXPECT_GT(bf16[w], 0);
    EXPECT_NEAR(2 * bf16[w], float32[w], 0.2) << "worker " << w;  // printed to 0.1 kB
  }

  const nlohmann::json sync =
      RunJob({"--workers=2", "--mode=sync", "--max_steps=150", "--wire_dtype=bf16"});
  ASSERT_TRUE(sync.is_object()) << output_;
  EXPECT_EQ(sync["global_step"], 150);
  EXPECT_EQ(PushedKbPerStep(output_, "bf16").size(), 2u) << output_;
}

// --gradient_compression=topk:0.01: the demo trains with 2% of the pushed
// bytes (1% of the entries, 8 bytes each), here with SGD, which adds the
// held-back gradients up as the ps applies them (adam's step squashes a
// burst of accumulated gradient to one step of its rate: see
// docs/training-modes.md); and bf16 values with it.
TEST_F(ModesTest, WireTopK_DemoTrainsWithAFiftiethOfThePushedBytes) {
  const std::vector<std::string> sgd = {"--workers=2", "--optimizer=sgd", "--learning_rate=0.1"};
  std::vector<std::string> flags = sgd;
  flags.insert(flags.end(), {"--epochs=3", "--gradient_compression=topk:0.01"});
  const nlohmann::json result = RunJob(flags);
  ASSERT_TRUE(result.is_object()) << output_;
  std::printf("top-k 1%%: accuracy %.4f, %.0f examples/s\n", result["test_accuracy"].get<double>(),
              result["examples_per_sec"].get<double>());
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.85) << result.dump();
  const std::vector<double> topk = PushedKbPerStep(output_, "float32; gradients as their top 1%");
  ASSERT_EQ(topk.size(), 2u) << output_;

  flags = sgd;
  flags.insert(flags.end(), {"--max_steps=100", "--gradient_compression=topk:0.01",
                             "--wire_dtype=bf16", "--mode=sync"});
  ASSERT_TRUE(RunJob(flags).is_object()) << output_;
  EXPECT_EQ(PushedKbPerStep(output_, "bf16; gradients as their top 1%").size(), 2u) << output_;

  ASSERT_TRUE(RunJob({"--workers=2", "--mode=sync", "--max_steps=50"}).is_object()) << output_;
  const std::vector<double> float32 = PushedKbPerStep(output_, "float32");
  ASSERT_EQ(float32.size(), 2u) << output_;
  for (int w = 0; w < 2; ++w) {
    EXPECT_GT(topk[w], 0);
    EXPECT_LT(topk[w], 0.025 * float32[w]) << "worker " << w;
  }
}

TEST_F(ModesTest, WorkerLeavingSyncJob_LowersQuorum_AndTheJobFinishes) {
  const std::string summary = dir_ + "/summary.json";
  std::unique_ptr<TestProcess> launcher =
      LaunchLocal({"--ps=2", "--workers=3", "--mode=sync", "--epochs=20", "--max_steps=600",
                   "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("worker:2] training on", absl::Seconds(120)))
      << launcher->output();
  const auto pids = DaemonPids(launcher->output());
  ASSERT_TRUE(pids.contains("worker:2")) << launcher->output();
  kill(pids.at("worker:2"), SIGTERM);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  const std::string output = launcher->output();
  ASSERT_TRUE(exited.has_value()) << output;
  EXPECT_EQ(ExitCode(*exited), 0) << output;
  EXPECT_NE(output.find("2 worker(s) still training; sync quorum now 2"), std::string::npos)
      << output;
  const nlohmann::json result = ReadJsonFile(summary);
  ASSERT_TRUE(result.is_object()) << output;
  EXPECT_GE(result["global_step"].get<int64_t>(), 600);
}

}  // namespace
}  // namespace pst::testing
