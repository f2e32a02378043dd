// Process lifecycle helpers: shutdown on SIGINT/SIGTERM, incarnation ids,
// peak memory.
#ifndef PST_COMMON_PROCESS_H_
#define PST_COMMON_PROCESS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace pst::common {

// Stops ProcessStopSignal() with the reason "<why> <signo>" each time
// SIGINT or SIGTERM arrives, whichever thread the kernel delivers it to; the
// Stop runs on an ordinary thread. That thread lives until the process ends,
// after main() has returned too (a container runtime stops every process of
// a job at once, so a SIGTERM can come while one exits), which is why it
// stops nothing but the never-destroyed ProcessStopSignal().
// REQUIRES: called once per process, early in main().
void StopOnTerminationSignals(std::string why);

// A random, nonzero id for this process's life. A restarted process gets a
// new one, which is how peers tell a restart (state lost) from a slow peer.
uint64_t NewIncarnation();

// This process's peak resident memory (VmHWM of /proc/self/status) in
// bytes, or -1 where it cannot be read.
int64_t PeakResidentBytes();

// Tunes a daemon (or a benchmark standing for one) for serving:
//  - glibc's malloc, for large tensors:
//    - blocks up to 32 MB (glibc's most) come from the heap rather than
//      fresh mmaps, so the payload buffers of a request (at most a few MB,
//      as big tensors travel in pieces) reuse memory freed by the last one
//      instead of faulting in new pages;
//    - up to 64 MB free at the top of a heap stays mapped for the next
//      request; more is handed back;
//    - at most 2 arenas: every gRPC thread otherwise gets its own, each
//      caching freed payload buffers, which had a ps resident at 3x its
//      variables.
//  - Abseil's mutex deadlock detector off. Debian builds Abseil without
//    NDEBUG, which leaves it on: every absl::Mutex operation (gRPC's own
//    locks included) then updates a process-wide lock graph under a global
//    lock, and a lock-order inversion the detector merely sees, one that
//    never deadlocked, aborts the process. A release build has it off, and
//    so does every daemon here. Unit tests, which do not call this, keep
//    it on.
// Call once, at start-up, before other threads start.
void TuneForServing();

// A one-way "stop now" flag with a reason. Stop() may be called any number of
// times from any thread; the first reason is kept. Thread-safe.
class StopSignal {
 public:
  void Stop(std::string reason);
  bool stopped() const { return done_.HasBeenNotified(); }
  // Returns true if stopped within `timeout`.
  bool WaitFor(absl::Duration timeout) const {
    return done_.WaitForNotificationWithTimeout(timeout);
  }
  void Wait() const { done_.WaitForNotification(); }
  std::string reason() const;

 private:
  mutable absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

// The process's StopSignal, the one the termination signals stop (see
// StopOnTerminationSignals). Never destroyed.
StopSignal& ProcessStopSignal();

}  // namespace pst::common

#endif  // PST_COMMON_PROCESS_H_
