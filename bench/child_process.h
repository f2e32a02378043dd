// A process the benchmark starts and ends: a ps_server, or one of its own
// worker processes. Its output (stdout and stderr) is read by a thread of
// its own, its last lines kept for error messages and, when asked, echoed.
#ifndef PST_BENCH_CHILD_PROCESS_H_
#define PST_BENCH_CHILD_PROCESS_H_

#include <sys/types.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tools/subprocess.h"

namespace pst::bench {

// Thread-compatible, but Tail(), which may be called from any thread.
class ChildProcess {
 public:
  // Starts `spawn`. With `echo`, each line it writes goes to stderr as
  // "[label] line". Errors: those of tools::Spawn.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const tools::SpawnOptions& spawn,
                                                             std::string label, bool echo);
  // Stop(0): SIGTERM unless it has exited.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& label() const { return label_; }
  // "; its last output:\n  ..." (its last 20 lines), or "" when it wrote
  // nothing.
  std::string Tail();
  // Its wait status once it has exited (reaped here), nullopt while it runs.
  std::optional<int> Poll();
  // "<label> (pid N) exited with status 1; its last output: ...", once it
  // has exited; "" while it runs.
  std::string DescribeExit();
  // Waits up to `grace` for it to exit by itself, then sends SIGTERM and
  // waits 5 s, then SIGKILL; reaps it and joins the reader. Its wait status.
  int Stop(absl::Duration grace);

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  std::string label_;
  std::optional<int> wait_status_;
  std::thread reader_;
  absl::Mutex mu_;
  std::deque<std::string> tail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::bench

#endif  // PST_BENCH_CHILD_PROCESS_H_
