#include "tests/test_cluster.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/grpc_channel.h"
#include "common/tf_config.h"
#include "tools/subprocess.h"

namespace pst::testing {

std::string BinaryPath(const std::string& name) { return absl::StrCat(PST_BIN_DIR, "/", name); }

absl::StatusOr<std::unique_ptr<TestProcess>> TestProcess::Start(std::vector<std::string> argv,
                                                                std::vector<std::string> env) {
  std::unique_ptr<TestProcess> process(new TestProcess());
  tools::SpawnOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  int fd = -1;
  absl::StatusOr<pid_t> pid = tools::Spawn(options, &fd);
  if (!pid.ok()) return pid.status();
  process->pid_ = *pid;
  TestProcess* p = process.get();
  p->reader_ = std::thread([p, fd] {
    tools::ForEachLine(fd, [p](const std::string& line) {
      absl::MutexLock lock(&p->mu_);
      p->output_ += line;
      p->output_ += '\n';
    });
    absl::MutexLock lock(&p->mu_);
    p->output_closed_ = true;
  });
  p->waiter_ = std::thread([p] {
    int status = 0;
    while (waitpid(p->pid_, &status, 0) < 0 && errno == EINTR) {
    }
    p->wait_status_ = status;
    p->exited_.Notify();
  });
  return process;
}

TestProcess::~TestProcess() {
  if (!exited_.HasBeenNotified()) kill(pid_, SIGKILL);
  waiter_.join();
  reader_.join();
}

bool TestProcess::WaitForOutput(const std::string& needle, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto found_or_closed = [this, &needle]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return output_closed_ || output_.find(needle) != std::string::npos;
  };
  mu_.AwaitWithTimeout(absl::Condition(&found_or_closed), timeout);
  return output_.find(needle) != std::string::npos;
}

std::optional<size_t> TestProcess::WaitForOutputAfter(const std::string& needle, size_t from,
                                                      absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto found_or_closed = [this, &needle, from]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return output_closed_ || output_.find(needle, from) != std::string::npos;
  };
  mu_.AwaitWithTimeout(absl::Condition(&found_or_closed), timeout);
  const size_t at = output_.find(needle, from);
  if (at == std::string::npos) return std::nullopt;
  return at;
}

std::optional<int> TestProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (!exited_.WaitForNotificationWithTimeout(timeout)) return std::nullopt;
  // Also wait for the last of its output to be read.
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&output_closed_), deadline);
  return wait_status_;
}

void TestProcess::Signal(int signo) {
  if (!exited_.HasBeenNotified()) kill(pid_, signo);
}

std::string TestProcess::output() const {
  absl::MutexLock lock(&mu_);
  return output_;
}

bool WaitForPidExit(pid_t pid, absl::Duration timeout) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // already gone
  pollfd pfd{fd, POLLIN, 0};
  const int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  close(fd);
  return ready == 1;
}

LocalSpec PickLocalSpec(int chiefs, int ps, int workers) {
  LocalSpec spec;
  const std::vector<int> ports = tools::PickFreePorts(chiefs + ps + workers).value();
  size_t next = 0;
  auto fill = [&](std::vector<std::string>* list, int n) {
    for (int i = 0; i < n; ++i) list->push_back(absl::StrCat("127.0.0.1:", ports[next++]));
  };
  fill(&spec.chief, chiefs);
  fill(&spec.ps, ps);
  fill(&spec.worker, workers);
  return spec;
}

std::string TfConfigJson(const LocalSpec& spec, const std::string& type, int index) {
  common::TfConfig tf;
  tf.cluster.chief = spec.chief;
  tf.cluster.ps = spec.ps;
  tf.cluster.worker = spec.worker;
  tf.task.type = common::ParseTaskType(type).value();
  tf.task.index = index;
  return common::TfConfigToJson(tf);
}

int ExitCode(int wait_status) { return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1; }

Outcome Finish(absl::StatusOr<std::unique_ptr<TestProcess>> process, absl::Time start,
               absl::Duration timeout) {
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {};
  std::optional<int> exited = (*process)->WaitForExit(timeout);
  EXPECT_TRUE(exited.has_value()) << (*process)->output();
  return {exited.has_value() ? ExitCode(*exited) : -1, (*process)->output(), absl::Now() - start};
}

Outcome RunToExit(std::vector<std::string> argv, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  return Finish(TestProcess::Start(std::move(argv)), start, timeout);
}

void LonePsTest::SetUp() {
  spec_ = PickLocalSpec(1, 1, 1);
  // Beside TestDir(), which a test may empty again.
  checkpoint_dir_ = TestDir() + "_ps_checkpoints";
  std::filesystem::remove_all(checkpoint_dir_);
  auto ps = TestProcess::Start({BinaryPath("ps_server"), "--checkpoint_dir=" + checkpoint_dir_},
                               {"TF_CONFIG=" + TfConfigJson(spec_, "ps", 0)});
  ASSERT_TRUE(ps.ok()) << ps.status();
  ps_ = *std::move(ps);
  stub_ = proto::ParameterServer::NewStub(rpc::MakeChannel(spec_.ps[0], rpc::RpcSettings()));
}

std::unique_ptr<TestProcess> LaunchLocal(const std::vector<std::string>& flags,
                                         const std::vector<std::string>& env) {
  std::vector<std::string> argv = {BinaryPath("pstrain"), "local",
                                   "--heartbeat_ms=200",  "--log_every_s=1",
                                   "--peer_timeout_s=30", "--startup_timeout_s=60",
                                   "--timeout_s=240",     "--grace_s=5"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<TestProcess>> process = TestProcess::Start(argv, env);
  return process.ok() ? *std::move(process) : nullptr;
}

std::map<std::string, pid_t> DaemonPids(const std::string& launcher_output) {
  std::map<std::string, pid_t> pids;
  const std::regex started(R"(started (\S+) \(pid (\d+)\))");
  for (std::sregex_iterator it(launcher_output.begin(), launcher_output.end(), started), end;
       it != end; ++it) {
    pids[(*it)[1]] = std::stoi((*it)[2]);
  }
  return pids;
}

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

bool HaveFashionMnist() { return std::filesystem::exists(kFashionMnistDir); }

int InspectCheckpoints(const std::string& dir, std::string* report) {
  auto inspect = TestProcess::Start({BinaryPath("pstrain"), "checkpoint", "inspect", dir});
  if (!inspect.ok()) {
    *report = std::string(inspect.status().message());
    return -1;
  }
  std::optional<int> exited = (*inspect)->WaitForExit(absl::Seconds(120));
  *report = (*inspect)->output();
  return exited.has_value() ? ExitCode(*exited) : -1;
}

std::string TestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), "_", info->name());
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  const std::string dir = absl::StrCat(::testing::TempDir(), "/pst_", getpid(), "_", name);
  // Empty, even when --gtest_repeat runs the test again in this process.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace pst::testing
