#include "chief/ps_peers.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::chief {

absl::StatusOr<int> CreateOnPs(common::PsControl& control, int index, const std::string& address,
                               const proto::CreateVariablesRequest& request, absl::Time deadline,
                               common::Clock& clock, const common::StopSignal& stop) {
  absl::Duration backoff = absl::Milliseconds(50);
  for (;; backoff = std::min(2 * backoff, absl::Seconds(1))) {
    absl::StatusOr<proto::CreateVariablesResponse> response =
        control.CreateVariables(index, request, absl::Seconds(2));
    if (response.ok()) return response->created();
    const absl::Status& s = response.status();
    const bool retry = s.code() == absl::StatusCode::kUnavailable ||
                       s.code() == absl::StatusCode::kDeadlineExceeded;
    if (!retry) {
      return absl::Status(s.code(), absl::StrCat("ps at ", address, ": ", s.message()));
    }
    if (clock.WaitFor(backoff, stop)) {
      return absl::CancelledError("stopped while creating variables");
    }
    if (clock.Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ps at ", address, " did not come up within --startup_timeout_s: ", s.message()));
    }
  }
}

absl::StatusOr<proto::HealthResponse> ProbePs(common::PsControl& control, int index,
                                              absl::Duration timeout) {
  proto::HealthRequest request;
  request.set_caller("chief");
  return control.Health(index, request, timeout);
}

absl::Status ForEachPs(size_t n, const std::function<absl::Status(size_t)>& call) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { statuses[i] = call(i); });
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) PST_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

void ShutdownAllPs(common::PsControl& control, const std::string& reason) {
  proto::ShutdownRequest request;
  request.set_reason(reason);
  ForEachPs(control.num_ps(), [&](size_t i) {
    control.Shutdown(static_cast<int>(i), request, absl::Seconds(5)).IgnoreError();
    return absl::OkStatus();
  }).IgnoreError();
}

}  // namespace pst::chief
