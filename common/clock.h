// Time as the job logic sees it: what time it is, and how to wait. The
// daemons use the real clock; a test injects its own, so that the chief's
// timers (heartbeat polls, peer and recovery timeouts) run when the test
// says and every decision they drive is reproducible.
//
// Thread-safety: implementations are safe for concurrent calls.
#ifndef PST_COMMON_CLOCK_H_
#define PST_COMMON_CLOCK_H_

#include "absl/time/time.h"
#include "common/process.h"

namespace pst::common {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() = 0;

  // Waits `timeout`, or until `stop` is stopped; true if stopped (then
  // maybe before `timeout` has passed).
  virtual bool WaitFor(absl::Duration timeout, const StopSignal& stop) = 0;
};

// absl::Now() and StopSignal::WaitFor. Never destroyed.
Clock* RealClock();

}  // namespace pst::common

#endif  // PST_COMMON_CLOCK_H_
