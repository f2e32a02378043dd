#include "chief/busy_retry.h"

#include <algorithm>

namespace pst::chief {

absl::Status CallWhileBusy(const std::function<absl::Status()>& call, absl::Duration budget,
                           absl::Duration first_wait) {
  const absl::Time deadline = absl::Now() + budget;
  absl::Duration wait = first_wait;
  while (true) {
    absl::Status status = call();
    if (status.code() != absl::StatusCode::kResourceExhausted) return status;
    const absl::Time now = absl::Now();
    if (now >= deadline) return status;
    absl::SleepFor(std::min(wait, deadline - now));
    wait = std::min(2 * wait, absl::Seconds(1));
  }
}

}  // namespace pst::chief
