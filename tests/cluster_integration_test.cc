// Whole clusters started with `pstrain local`: real processes, real gRPC,
// real Fashion-MNIST.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kJobTimeout = absl::Seconds(240);

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) {
      GTEST_SKIP() << kFashionMnistDir << " is missing: install Debian's dataset-fashion-mnist";
    }
    dir_ = TestDir();
  }

  static std::unique_ptr<TestProcess> Launch(std::vector<std::string> flags) {
    auto process = LaunchLocal(flags);
    EXPECT_NE(process, nullptr);
    return process;
  }
  static nlohmann::json ReadJson(const std::string& path) { return ReadJsonFile(path); }

  std::string dir_;
};

TEST_F(ClusterTest, SmallJob_Trains_AndEveryProcessExitsZero) {
  const std::string summary = dir_ + "/summary.json";
  auto launcher = Launch(
      {"--ps=2", "--workers=2", "--epochs=1", "--max_steps=300", "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  const std::string output = launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << output;
  for (const char* task : {"ps:0", "ps:1", "chief:0", "worker:0", "worker:1"}) {
    EXPECT_NE(output.find(absl::StrCat(task, " exited with status 0")), std::string::npos)
        << task << "\n"
        << output;
  }
  const nlohmann::json result = ReadJson(summary);
  ASSERT_TRUE(result.is_object()) << output;
  EXPECT_GE(result["global_step"].get<int64_t>(), 300);
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.70) << result.dump();
  EXPECT_GT(result["examples_per_sec"].get<double>(), 0);
  EXPECT_GT(result["wall_seconds"].get<double>(), 0);
  // Progress lines came out while training.
  EXPECT_NE(output.find("examples/s"), std::string::npos);
}

TEST_F(ClusterTest, TwoCpuDevicesPerWorker_SplitEachBatch_AndTrain) {
  const std::string summary = dir_ + "/summary.json";
  auto launcher =
      Launch({"--ps=1", "--workers=1", "--epochs=1", "--max_steps=300", "--cpu_devices=2",
              "--log_device_placement", "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  const std::string output = launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << output;
  EXPECT_NE(output.find("Created device /job:worker/replica:0/task:0/device:CPU:1"),
            std::string::npos)
      << output;
  // The placement log puts a copy of each layer's matmul on each device.
  EXPECT_NE(output.find("/job:worker/replica:0/task:0/device:CPU:1"), std::string::npos);
  const nlohmann::json result = ReadJson(summary);
  ASSERT_TRUE(result.is_object()) << output;
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.70) << result.dump();
}

TEST_F(ClusterTest, BadDeviceFlag_FailsTheWorkerWithAClearMessage) {
  auto launcher = Launch({"--ps=1", "--workers=1", "--epochs=1", "--gpu_memory=lots"});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_NE(ExitCode(*exited), 0) << launcher->output();
  EXPECT_NE(launcher->output().find("--gpu_memory=lots: unknown policy"), std::string::npos)
      << launcher->output();
  // A usage error, found before the worker registers.
  EXPECT_NE(launcher->output().find("worker:0 exited with status 2"), std::string::npos)
      << launcher->output();
}

TEST_F(ClusterTest, NoChief_WorkerZeroActsAsChief) {
  const std::string summary = dir_ + "/summary.json";
  auto launcher = Launch({"--chief=false", "--ps=1", "--workers=2", "--epochs=1", "--max_steps=100",
                          "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  const std::string output = launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << output;
  EXPECT_NE(output.find("this worker also acts as chief"), std::string::npos) << output;
  EXPECT_EQ(output.find("chief:0"), std::string::npos) << output;
  const nlohmann::json result = ReadJson(summary);
  ASSERT_TRUE(result.is_object()) << output;
  EXPECT_GE(result["global_step"].get<int64_t>(), 100);
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.5) << result.dump();
}

TEST_F(ClusterTest, FailingDaemon_StopsTheWholeJob) {
  auto launcher = Launch({"--ps=2", "--workers=2", "--data_dir=" + dir_ + "/no_such_dir"});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  const std::string output = launcher->output();
  EXPECT_EQ(ExitCode(*exited), 1) << output;
  EXPECT_NE(output.find("dataset-fashion-mnist"), std::string::npos) << output;
  const auto pids = DaemonPids(output);
  EXPECT_EQ(pids.size(), 5u) << output;
  for (const auto& [task, pid] : pids) {
    EXPECT_TRUE(WaitForPidExit(pid, absl::Seconds(30))) << task << " (pid " << pid << ")";
  }
}

// Starts a long job and waits until both workers are training.
std::unique_ptr<TestProcess> StartLongJob(
    ClusterTest* test,
    const std::function<std::unique_ptr<TestProcess>(std::vector<std::string>)>& launch) {
  auto launcher = launch({"--ps=2", "--workers=2", "--epochs=50"});
  if (launcher == nullptr) return nullptr;
  for (const char* worker : {"worker:0", "worker:1"}) {
    const std::string line = absl::StrCat(worker, "] training on");
    EXPECT_TRUE(launcher->WaitForOutput(line, absl::Seconds(120))) << launcher->output();
  }
  return launcher;
}

TEST_F(ClusterTest, KillingTheLauncher_LeavesNoProcessBehind) {
  auto launcher = StartLongJob(this, [this](auto flags) { return Launch(flags); });
  ASSERT_NE(launcher, nullptr);
  const auto pids = DaemonPids(launcher->output());
  ASSERT_EQ(pids.size(), 5u) << launcher->output();
  launcher->Signal(SIGKILL);
  ASSERT_TRUE(launcher->WaitForExit(absl::Seconds(30)).has_value());
  for (const auto& [task, pid] : pids) {
    EXPECT_TRUE(WaitForPidExit(pid, absl::Seconds(30))) << task << " (pid " << pid << ") survived";
  }
}

TEST_F(ClusterTest, CtrlC_StopsEveryDaemon_AndExits130) {
  auto launcher = StartLongJob(this, [this](auto flags) { return Launch(flags); });
  ASSERT_NE(launcher, nullptr);
  const auto pids = DaemonPids(launcher->output());
  ASSERT_EQ(pids.size(), 5u) << launcher->output();
  launcher->Signal(SIGINT);
  std::optional<int> exited = launcher->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(ExitCode(*exited), 130) << launcher->output();
  for (const auto& [task, pid] : pids) {
    EXPECT_TRUE(WaitForPidExit(pid, absl::Seconds(5))) << task << " (pid " << pid << ") survived";
  }
}

}  // namespace
}  // namespace pst::testing
