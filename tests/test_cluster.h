// Helpers for integration tests that start the real binaries.
#ifndef PST_TESTS_TEST_CLUSTER_H_
#define PST_TESTS_TEST_CLUSTER_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.grpc.pb.h"

namespace pst::testing {

// Path of a built binary: "ps_server", "worker", "chief", "pstrain".
std::string BinaryPath(const std::string& name);

// A child process whose output (stdout and stderr) is collected in memory.
// The destructor kills it (SIGKILL) if it is still running.
class TestProcess {
 public:
  static absl::StatusOr<std::unique_ptr<TestProcess>> Start(std::vector<std::string> argv,
                                                            std::vector<std::string> env = {});
  ~TestProcess();

  pid_t pid() const { return pid_; }
  // Waits until the output contains `needle`; false on timeout or exit.
  bool WaitForOutput(const std::string& needle, absl::Duration timeout);
  // Waits until `needle` occurs at or after offset `from` of the output;
  // where it starts, or nullopt on timeout or exit.
  std::optional<size_t> WaitForOutputAfter(const std::string& needle, size_t from,
                                           absl::Duration timeout);
  // Waits for the process to exit and for the end of its output; its wait
  // status, or nullopt on timeout.
  std::optional<int> WaitForExit(absl::Duration timeout);
  void Signal(int signo);
  std::string output() const;

 private:
  TestProcess() = default;

  pid_t pid_ = -1;
  std::thread reader_;
  std::thread waiter_;
  absl::Notification exited_;
  int wait_status_ = 0;  // valid once exited_
  mutable absl::Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
  bool output_closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Waits until the process `pid` (not necessarily our child) has exited,
// without polling: a pidfd becomes readable when its process exits.
// True if it exited (or did not exist) within `timeout`.
bool WaitForPidExit(pid_t pid, absl::Duration timeout);

// A TF_CONFIG JSON for a cluster on 127.0.0.1 with free ports.
struct LocalSpec {
  std::vector<std::string> chief, ps, worker;
};
LocalSpec PickLocalSpec(int chiefs, int ps, int workers);
std::string TfConfigJson(const LocalSpec& spec, const std::string& type, int index);

// Exit code of a wait status, or -1 when the process was killed by a signal.
int ExitCode(int wait_status);

// How a process that ran to its end ended: its exit code (-1 if it was
// killed, did not start, or did not exit within the timeout: the test has
// then failed already), its output, and how long it took from `start`.
struct Outcome {
  int exit_code = -1;
  std::string output;
  absl::Duration took;
};
// Waits up to `timeout` for `process` to exit (a failed start or a timeout
// fails the test).
Outcome Finish(absl::StatusOr<std::unique_ptr<TestProcess>> process, absl::Time start,
               absl::Duration timeout);
// Starts `argv` and waits up to `timeout` for it to exit.
Outcome RunToExit(std::vector<std::string> argv, absl::Duration timeout = absl::Seconds(30));

// A fixture that starts one ps_server (cluster: 1 chief, 1 ps, 1 worker on
// free ports) and holds a stub to it.
class LonePsTest : public ::testing::Test {
 protected:
  void SetUp() override;

  LocalSpec spec_;
  std::string checkpoint_dir_;  // the ps's --checkpoint_dir (made by the ps)
  std::unique_ptr<TestProcess> ps_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

// Starts `pstrain local` with test-friendly timing (fast heartbeats and
// progress lines, bounded startup, a 240 s job timeout) and `flags`, which
// come last and so override those. `env` ("NAME=value") is added to the
// launcher's environment, which every daemon inherits.
std::unique_ptr<TestProcess> LaunchLocal(const std::vector<std::string>& flags,
                                         const std::vector<std::string>& env = {});

// The daemons `pstrain local` reported starting: task -> pid.
std::map<std::string, pid_t> DaemonPids(const std::string& launcher_output);

// A file's JSON; a discarded value (not an object) when unreadable or bad.
nlohmann::json ReadJsonFile(const std::string& path);

// A fresh directory for the current test's files.
std::string TestDir();

// Where Debian's dataset-fashion-mnist puts the data, and whether it is
// there (tests that train skip without it).
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
bool HaveFashionMnist();

// Runs `pstrain checkpoint inspect DIR` (a checkpoint or a root); its exit
// code (-1 when it did not finish in time) and, in `*report`, its output.
int InspectCheckpoints(const std::string& dir, std::string* report);

}  // namespace pst::testing

#endif  // PST_TESTS_TEST_CLUSTER_H_
