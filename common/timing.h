// The timeouts and intervals of a job, as the daemons take them from their
// flags (flags/job_flags.h: TimingFromFlags).
#ifndef PST_COMMON_TIMING_H_
#define PST_COMMON_TIMING_H_

#include "absl/time/time.h"

namespace pst::common {

struct Timing {
  absl::Duration heartbeat_interval;
  absl::Duration peer_timeout;     // a silent peer is declared dead after this
  absl::Duration startup_timeout;  // how long to wait for peers to come up
  absl::Duration rpc_timeout;      // deadline of one data-plane RPC
  absl::Duration recovery_timeout;  // how long a failure may last
  absl::Duration log_every;
};

}  // namespace pst::common

#endif  // PST_COMMON_TIMING_H_
