// Whole clusters started with `pstrain local`: real processes, real gRPC,
// real Fashion-MNIST.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/event_writer.h"
#include "nlohmann/json.hpp"
#include "proto/tensorboard.pb.h"
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
  // Where the slowest worker's steps went, and what would help: each
  // worker's figures as it reported them when it finished.
  ASSERT_EQ(result["step_times"].size(), 2u) << result.dump();
  int64_t steps = 0;
  for (const nlohmann::json& t : result["step_times"]) {
    ASSERT_TRUE(t.is_object()) << result.dump();
    EXPECT_GT(t["compute_ms"].get<double>(), 0);
    EXPECT_GE(t["communication_ms"].get<double>(), t["exposed_ms"].get<double>());
    EXPECT_GT(t["pushed_kb"].get<double>(), 0);
    steps += t["steps"].get<int64_t>();
  }
  EXPECT_EQ(steps, result["global_step"].get<int64_t>()) << "async: a step per push";
  ASSERT_TRUE(result["advice"].is_string()) << result.dump();
  const std::string advice = result["advice"];
  EXPECT_NE(output.find(absl::StrCat("slowest worker ", result["slowest_worker"].get<int>(), ": ")),
            std::string::npos)
      << output;
  EXPECT_NE(output.find(advice), std::string::npos) << output;
  // Progress lines came out while training.
  EXPECT_NE(output.find("examples/s"), std::string::npos);
  // Not on a terminal: plain lines (no live-line '\r'), the total known
  // from --max_steps, and a last one once every worker is done.
  EXPECT_NE(output.find("/300 | epoch 1/1 | loss "), std::string::npos) << output;
  EXPECT_NE(output.find(" | workers 2/2 done"), std::string::npos) << output;
  EXPECT_EQ(output.find('\r'), std::string::npos) << output;
  // That last line shows the step the job ended at, the summary's.
  const size_t done = output.rfind(" | workers 2/2 done");
  const size_t line = output.rfind('\n', done) + 1;
  EXPECT_NE(output.substr(line, done - line)
                .find(absl::StrCat("step ", result["global_step"].get<int64_t>(), "/300 |")),
            std::string::npos)
      << output.substr(line, done - line);
}

// --bdp_probe=false reaches every daemon through the launcher, and a job
// trains over the fixed windows it sets.
TEST_F(ClusterTest, BdpProbeOff_ReachesTheDaemons_AndTheJobTrains) {
  const std::string summary = dir_ + "/summary.json";
  auto launcher = Launch({"--ps=2", "--workers=2", "--epochs=1", "--max_steps=300",
                          "--bdp_probe=false", "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  const std::string output = launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << output;
  for (const char* ps : {"ps:0", "ps:1"}) {
    EXPECT_NE(output.find(absl::StrCat(ps, "] serving on")), std::string::npos) << output;
  }
  size_t fixed = 0;
  for (size_t at = output.find("fixed 16 MiB HTTP/2 windows"); at != std::string::npos;
       at = output.find("fixed 16 MiB HTTP/2 windows", at + 1)) {
    ++fixed;
  }
  EXPECT_EQ(fixed, 2u) << "each ps says it runs without BDP probing\n" << output;
  const nlohmann::json result = ReadJson(summary);
  ASSERT_TRUE(result.is_object()) << output;
  EXPECT_GE(result["global_step"].get<int64_t>(), 300);
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.70) << result.dump();
}

// --summary_dir: the chief's event file, read back record by record (both
// CRCs checked) and decoded as TensorBoard's Event messages.
TEST_F(ClusterTest, SummaryDir_EventFileHoldsTheTrainingCurvesAndTheTestMetrics) {
  const std::string summary = dir_ + "/summary.json";
  const std::string events_dir = dir_ + "/tensorboard";
  // The chief writes scalars at its heartbeats (at most one each): 50 ms
  // ones, so that a job done in a second on a fast machine still gives
  // several points.
  auto launcher =
      Launch({"--ps=1", "--workers=2", "--epochs=1", "--max_steps=600", "--summary_steps=50",
              "--heartbeat_ms=50", "--lr_schedule=step:200,gamma:0.5",
              "--summary_dir=" + events_dir, "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  ASSERT_EQ(ExitCode(*exited), 0) << launcher->output();
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(events_dir)) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("/events.out.tfevents."), std::string::npos) << files[0];
  absl::StatusOr<std::vector<std::string>> records = common::ReadRecords(files[0]);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_GE(records->size(), 4u);
  tensorboard::Event first;
  ASSERT_TRUE(first.ParseFromString(records->front()));
  EXPECT_EQ(first.file_version(), "brain.Event:2");

  std::map<std::string, std::vector<std::pair<int64_t, float>>> curves;
  for (size_t i = 1; i < records->size(); ++i) {
    tensorboard::Event event;
    ASSERT_TRUE(event.ParseFromString((*records)[i]));
    for (const auto& value : event.summary().value()) {
      curves[value.tag()].emplace_back(event.step(), value.simple_value());
    }
  }
  ASSERT_GE(curves["loss"].size(), 3u) << launcher->output();
  for (size_t i = 1; i < curves["loss"].size(); ++i) {
    EXPECT_GE(curves["loss"][i].first, curves["loss"][i - 1].first + 50) << "every 50 steps";
  }
  EXPECT_LT(curves["loss"].back().second, curves["loss"].front().second) << "the loss fell";
  ASSERT_FALSE(curves["examples_per_sec"].empty());
  for (const auto& [step, rate] : curves["examples_per_sec"]) EXPECT_GT(rate, 0) << step;
  // The schedule's rate at each step (mlp's base rate 0.001, halved every
  // 200 updates), as every ps applies it.
  // The progress lines show it too, at their own step.
  const std::string output = launcher->output();
  const std::regex progress(R"(step (\d+)/\d+ .* \| lr ([0-9.e+-]+))");
  int lines = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), progress);
       it != std::sregex_iterator(); ++it, ++lines) {
    const int64_t step = std::stoll((*it)[1]);
    EXPECT_NEAR(std::stod((*it)[2]), 0.001 * std::pow(0.5, step / 200), 1e-6) << it->str();
  }
  EXPECT_GE(lines, 1) << output;
  ASSERT_EQ(curves["learning_rate"].size(), curves["loss"].size());
  for (const auto& [step, rate] : curves["learning_rate"]) {
    EXPECT_FLOAT_EQ(rate, static_cast<float>(0.001 * std::pow(0.5, step / 200))) << step;
  }
  ASSERT_FALSE(curves["staleness"].empty());
  for (const auto& [step, staleness] : curves["staleness"]) EXPECT_GE(staleness, 0) << step;
  const nlohmann::json result = ReadJson(summary);
  ASSERT_EQ(curves["test_accuracy"].size(), 1u);
  EXPECT_FLOAT_EQ(curves["test_accuracy"][0].second, result["test_accuracy"].get<double>());
  EXPECT_EQ(curves["test_accuracy"][0].first, result["global_step"].get<int64_t>());
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

// Whether this process may make network namespaces (root and iproute2).
bool CanMakeNamespaces() {
  return geteuid() == 0 && (access("/usr/sbin/ip", X_OK) == 0 || access("/sbin/ip", X_OK) == 0 ||
                            access("/usr/bin/ip", X_OK) == 0);
}

// Namespaces `pstrain local --ps_link_rate` made (named after its pid).
int LinkNamespacesOf(pid_t launcher) {
  const std::string prefix = absl::StrCat("pstpb", launcher, "_");
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

// --ps_link_rate: each ps in a namespace of its own behind a shaped link;
// the job trains through them, and the namespaces are gone after it.
TEST_F(ClusterTest, PsBehindShapedLinks_JobTrains_AndTheLinksGoAway) {
  auto bad = Launch({"--ps=1", "--workers=1", "--ps_link_rate=fast"});
  ASSERT_NE(bad, nullptr);
  std::optional<int> refused = bad->WaitForExit(kJobTimeout);
  ASSERT_TRUE(refused.has_value()) << bad->output();
  EXPECT_EQ(ExitCode(*refused), 2) << bad->output();
  EXPECT_NE(bad->output().find("--ps_link_rate=fast is not a tc rate"), std::string::npos)
      << bad->output();
  if (!CanMakeNamespaces()) GTEST_SKIP() << "needs root and iproute2";

  const std::string summary = dir_ + "/summary.json";
  auto launcher = Launch({"--ps=2", "--workers=2", "--max_steps=200", "--ps_link_rate=1gbit",
                          "--wire_dtype=bf16", "--summary_json=" + summary});
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("each ps behind a link of 1gbit", kJobTimeout))
      << launcher->output();
  EXPECT_EQ(LinkNamespacesOf(launcher->pid()), 2) << launcher->output();
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << launcher->output();
  // The ps listened inside their namespaces, not on loopback.
  EXPECT_TRUE(std::regex_search(launcher->output(), std::regex(R"(ps \[10\.\d+\.\d+\.2:\d+, )")))
      << launcher->output();
  const nlohmann::json result = ReadJson(summary);
  ASSERT_TRUE(result.is_object()) << launcher->output();
  EXPECT_GE(result["global_step"].get<int64_t>(), 200);
  EXPECT_EQ(LinkNamespacesOf(launcher->pid()), 0);
}

TEST_F(ClusterTest, BadDeviceFlag_IsRefusedBeforeAnyDaemonStarts) {
  auto launcher = Launch({"--ps=1", "--workers=1", "--epochs=1", "--gpu_memory=lots"});
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(kJobTimeout);
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_NE(ExitCode(*exited), 0) << launcher->output();
  EXPECT_NE(launcher->output().find("--gpu_memory=lots: unknown policy"), std::string::npos)
      << launcher->output();
  // A usage error, found by the launcher before it starts any daemon (each
  // worker would refuse it too; tests/start_checks_integration_test).
  EXPECT_EQ(ExitCode(*exited), 2) << launcher->output();
  EXPECT_TRUE(DaemonPids(launcher->output()).empty()) << launcher->output();
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

// Two replicas of one worker service with the same TF_CONFIG (task index
// 0 for both), as docker-compose --scale starts them: each claims its own
// index from the chief, so they train disjoint shards and the job ends.
TEST_F(ClusterTest, ScaledWorkers_ClaimTheirIndicesFromTheChief) {
  const LocalSpec spec = PickLocalSpec(1, 1, 2);
  const std::vector<std::string> flags = {"--epochs=1", "--max_steps=200", "--heartbeat_ms=200"};
  auto start = [&](const std::string& binary, const std::string& type,
                   std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinaryPath(binary)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto process = TestProcess::Start(argv, {"TF_CONFIG=" + TfConfigJson(spec, type, 0)});
    EXPECT_TRUE(process.ok()) << process.status();
    return process.ok() ? *std::move(process) : nullptr;
  };
  auto ps = start("ps_server", "ps", {});
  auto chief = start("chief", "chief", {});
  auto a = start("worker", "worker", {"--claim_worker_index", "--worker_claimant=replica-a"});
  auto b = start("worker", "worker", {"--claim_worker_index", "--worker_claimant=replica-b"});
  ASSERT_TRUE(ps && chief && a && b);
  std::optional<int> chief_exit = chief->WaitForExit(kJobTimeout);
  ASSERT_TRUE(chief_exit.has_value()) << chief->output();
  EXPECT_EQ(ExitCode(*chief_exit), 0) << chief->output();
  std::set<std::string> claimed;
  for (TestProcess* worker : {a.get(), b.get()}) {
    std::optional<int> exited = worker->WaitForExit(kJobTimeout);
    ASSERT_TRUE(exited.has_value()) << worker->output();
    EXPECT_EQ(ExitCode(*exited), 0) << worker->output();
    std::smatch m;
    const std::string output = worker->output();
    ASSERT_TRUE(std::regex_search(output, m, std::regex("claimed worker index (\\d) of 2")))
        << output;
    claimed.insert(m[1]);
  }
  EXPECT_EQ(claimed, (std::set<std::string>{"0", "1"}));
  EXPECT_NE(chief->output().find("workers 2/2 done"), std::string::npos) << chief->output();
  std::optional<int> ps_exit = ps->WaitForExit(kJobTimeout);
  ASSERT_TRUE(ps_exit.has_value()) << ps->output();
}

}  // namespace
}  // namespace pst::testing
