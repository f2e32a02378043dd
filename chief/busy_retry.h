// Calls to a ps that may find it busy: a ps runs at most a few saves and
// restores at once (ps_server/node/background_work.h) and refuses more with
// RESOURCE_EXHAUSTED before doing any of the work. A chief restarted while
// its predecessor's save still runs meets that refusal on its first save;
// it waits and asks again rather than fail the job.
//
// Thread-safety: a pure function of `call`.
#ifndef PST_CHIEF_BUSY_RETRY_H_
#define PST_CHIEF_BUSY_RETRY_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pst::chief {

// Runs `call`, and again while it answers RESOURCE_EXHAUSTED, waiting
// `first_wait`, then twice as long each time up to one second, until
// `budget` has passed since the first call. Returns the last answer: a
// refusal that outlasts the budget (a full disk, say) comes back as it is.
absl::Status CallWhileBusy(const std::function<absl::Status()>& call, absl::Duration budget,
                           absl::Duration first_wait = absl::Milliseconds(50));

}  // namespace pst::chief

#endif  // PST_CHIEF_BUSY_RETRY_H_
