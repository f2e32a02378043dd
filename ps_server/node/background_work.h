// Long calls (Save, Restore) run on threads of their own so that no gRPC
// thread waits on the disk. BackgroundWork bounds how many run at once,
// turns anything they throw into a status, refuses new work once the ps is
// stopping, and joins every thread before it goes: no work outlives the
// store it works on.
//
// Thread-safe.
#ifndef PST_PS_SERVER_NODE_BACKGROUND_WORK_H_
#define PST_PS_SERVER_NODE_BACKGROUND_WORK_H_

#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pst::ps {

class BackgroundWork {
 public:
  // At most `limit` jobs run at once.
  explicit BackgroundWork(int limit) : limit_(limit) {}
  // Stops and joins (see Stop).
  ~BackgroundWork();
  BackgroundWork(const BackgroundWork&) = delete;
  BackgroundWork& operator=(const BackgroundWork&) = delete;

  // Runs `work` on a thread of its own, then `finish` with its status (or
  // ResourceExhausted for a std::bad_alloc, Internal for another exception
  // `work` threw). `what` names the job in messages ("save").
  // Errors (and then neither runs): Unavailable once Stop was called;
  // ResourceExhausted when `limit` jobs are running. A job stops counting
  // when `work` returns, before `finish` runs.
  absl::Status Start(const std::string& what, std::function<absl::Status()> work,
                     std::function<void(absl::Status)> finish);

  // Refuses new jobs from now on, waits for the running ones to finish, and
  // joins their threads. Idempotent.
  void Stop();

  // Jobs running now.
  int running() const;

 private:
  struct Job {
    std::thread thread;
    bool done = false;
  };
  // Joins the threads of finished jobs. REQUIRES: mu_ held.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int limit_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::list<Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_NODE_BACKGROUND_WORK_H_
