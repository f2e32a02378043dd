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

absl::StatusOr<int> CreatePlanOnPs(common::PsControl& control, int shard, int index,
                                   const std::string& address, const proto::ClusterState& state,
                                   const InitialValuesFn& values, absl::Time deadline,
                                   common::Clock& clock, const common::StopSignal& stop,
                                   bool restoring) {
  proto::CreateVariablesRequest empty;
  *empty.mutable_optimizer() = state.training().optimizer();
  *empty.mutable_sync() = state.training().sync();
  if (state.plan().replicas() == 2 && shard == index && shard < state.plan().shards_size() &&
      state.plan().shards(shard).backup() >= 0) {
    *empty.mutable_copies() = state.plan().shards(shard);
    empty.set_restart_backup(restoring);
  }
  std::vector<const proto::VariableSpec*> entries;
  for (const auto& entry : state.plan().variables()) {
    if (entry.ps_index() == shard) entries.push_back(&entry.spec());
  }
  if (values == nullptr) {
    proto::CreateVariablesRequest request = empty;
    for (const proto::VariableSpec* spec : entries) *request.add_variables() = *spec;
    return CreateOnPs(control, index, address, request, deadline, clock, stop);
  }
  // A ps restarted between two requests lost the first ones: start again.
  constexpr int kAttempts = 3;
  for (int attempt = 0;; ++attempt) {
    int created = 0, requests = 0;
    uint64_t incarnation = 0;
    proto::CreateVariablesRequest request = empty;
    int64_t bytes = 0;
    auto send = [&]() -> absl::Status {
      if (request.variables_size() == 0) return absl::OkStatus();
      PST_ASSIGN_OR_RETURN(const int n,
                           CreateOnPs(control, index, address, request, deadline, clock, stop));
      created += n;
      if (++requests == 1) {
        PST_ASSIGN_OR_RETURN(const proto::HealthResponse health,
                             ProbePs(control, index, absl::Seconds(5)));
        incarnation = health.incarnation();
      }
      request = empty;
      bytes = 0;
      return absl::OkStatus();
    };
    for (const proto::VariableSpec* spec : entries) {
      PST_ASSIGN_OR_RETURN(std::string entry_values, values(*spec));
      const int64_t size = static_cast<int64_t>(entry_values.size());
      if (size > kMaxEntryValuesBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable '", spec->name(), "' has ", size, " bytes of initial values, more than one "
            "create request carries (", kMaxEntryValuesBytes, "): cut it with --dense_piece_bytes "
            "(dense) or a --partitioner (tables)"));
      }
      if (bytes > 0 && bytes + size > kCreateValuesBytes) PST_RETURN_IF_ERROR(send());
      *request.add_variables() = *spec;
      *request.add_initial_values() = std::move(entry_values);
      bytes += size;
    }
    PST_RETURN_IF_ERROR(send());
    if (requests <= 1) return created;
    PST_ASSIGN_OR_RETURN(const proto::HealthResponse health,
                         ProbePs(control, index, absl::Seconds(5)));
    if (health.incarnation() == incarnation) return created;
    if (attempt + 1 == kAttempts) {
      return absl::UnavailableError(absl::StrCat("ps at ", address, " restarted ", kAttempts,
                                                 " times while its variables were created"));
    }
  }
}

absl::StatusOr<proto::HealthResponse> ProbePs(common::PsControl& control, int index,
                                              absl::Duration timeout, bool digest) {
  proto::HealthRequest request;
  request.set_caller("chief");
  request.set_digest(digest);
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
