// VariableStore's parked calls (variable_store.h: PullWhenReady and
// PushPullWhenReady): the SyncLedger decides when a pull may be served and
// keeps the parked ones; the store answers them, with no lock held.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_util.h"
#include "ps_server/store/variable.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

bool VariableStore::VersionsReachedLocked(const proto::PullRequest& request) const {
  auto reached = [&](const Variable& var) {
    absl::ReaderMutexLock var_lock(&var.mu);
    return var.version >= request.min_version();
  };
  if (request.names().empty()) {
    for (const auto& [name, var] : variables_) {
      if (!var->is_hash && !reached(*var)) return false;
    }
    return true;
  }
  for (const std::string& name : request.names()) {
    auto it = variables_.find(name);
    if (it != variables_.end() && !reached(*it->second)) return false;
  }
  return true;
}

uint64_t VariableStore::PullWhenReady(const proto::PullRequest* request,
                                      proto::PullResponse* response, Done done) {
  absl::Status checked = CheckCounter(request->min_version(), "min_version");
  if (checked.ok()) checked = CheckCounter(request->clock(), "clock");
  if (checked.ok()) {
    checked = common::CheckWireDtype(request->wire_dtype(), "pull's wire_dtype", /*unset_ok=*/true);
  }
  if (checked.ok()) {
    absl::StatusOr<uint64_t> ticket;
    {
      absl::ReaderMutexLock lock(&mu_);
      ticket = ledger_.ParkUnlessReady(
          *request, response, &done,
          [this](const proto::PullRequest& r) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
            return VersionsReachedLocked(r);
          });
    }
    if (ticket.ok() && *ticket != 0) return *ticket;
    checked = ticket.status();
  }
  done(checked.ok() ? Pull(request->names(), response, request->wire_dtype()) : checked);
  return 0;
}

uint64_t VariableStore::PushPullWhenReady(const proto::PushPullRequest* request,
                                          proto::PullResponse* response, Done done,
                                          const Payloads* payloads, bool* applied) {
  proto::PushResponse pushed;
  response->Clear();
  if (applied != nullptr) *applied = false;
  absl::Status status = PushNoWake(request->push(), &pushed, payloads, response);
  if (!status.ok()) {
    done(status);
    return 0;
  }
  if (applied != nullptr) *applied = true;
  WakeWaiters();
  // ASYNC: the push answered with the values it left, under the same lock.
  if (request->push().names_size() > 0 && response->values_size() == request->push().names_size()) {
    done(absl::OkStatus());
    return 0;
  }
  proto::PullRequest pull;
  *pull.mutable_names() = request->push().names();
  pull.set_worker_index(request->push().worker_index());
  pull.set_min_version(request->push().step() + 1);
  pull.set_clock(request->push().step() + 1);
  pull.set_wire_dtype(request->push().wire_dtype());
  // PullWhenReady copies the request when it parks.
  return PullWhenReady(&pull, response, std::move(done));
}

absl::Status VariableStore::PushPull(const proto::PushPullRequest& request,
                                     proto::PullResponse* response) {
  absl::Notification done;
  absl::Status result;
  PushPullWhenReady(&request, response, [&](absl::Status status) {
    result = std::move(status);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

void VariableStore::WakeWaiters() {
  std::vector<SyncLedger::Waiter> ready;
  {
    absl::ReaderMutexLock lock(&mu_);
    ready = ledger_.TakeReady([this](const proto::PullRequest& r) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return VersionsReachedLocked(r);
    });
  }
  for (SyncLedger::Waiter& w : ready) {
    w.done(Pull(w.request.names(), w.response, w.request.wire_dtype()));
  }
}

bool VariableStore::CancelWaiter(uint64_t ticket) { return ledger_.Cancel(ticket); }

void VariableStore::CancelAllWaiters(const absl::Status& status) {
  for (SyncLedger::Waiter& w : ledger_.TakeAll()) w.done(status);
}

int VariableStore::ExpireParked(absl::Duration max_wait) {
  std::vector<SyncLedger::Waiter> expired = ledger_.TakeExpired(max_wait);
  for (SyncLedger::Waiter& w : expired) {
    w.done(absl::DeadlineExceededError(absl::StrCat(
        "this pull waited ", absl::FormatDuration(max_wait),
        " (--max_park_s) for a version or clock that did not come; pull again")));
  }
  return static_cast<int>(expired.size());
}

}  // namespace pst::ps
