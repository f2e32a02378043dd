// VariableStore's parked pulls (variable_store.h: PullWhenReady): when a
// pull may be answered in sync and ssp, waking and cancelling waiters, and
// expiring those parked too long.
#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ps_server/store/store_internal.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

int64_t VariableStore::MinActiveClockLocked() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (active_[w]) min_clock = std::min(min_clock, clocks_[w]);
  }
  return min_clock;
}

bool VariableStore::ReadyLocked(const proto::PullRequest& request) {
  if (request.worker_index() < 0 || !sync_set_) return true;
  switch (sync_.mode()) {
    case proto::SYNC: {
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
    case proto::SSP: {
      const int64_t min_clock = MinActiveClockLocked();
      if (min_clock == std::numeric_limits<int64_t>::max()) return true;
      if (request.clock() - sync_.staleness() > min_clock) return false;
      max_clock_gap_ = std::max(max_clock_gap_, request.clock() - min_clock);
      return true;
    }
    default:
      return true;
  }
}

uint64_t VariableStore::PullWhenReady(const proto::PullRequest* request,
                                      proto::PullResponse* response, Done done) {
  absl::Status checked = CheckCounter(request->min_version(), "min_version");
  if (checked.ok()) checked = CheckCounter(request->clock(), "clock");
  bool full = false;
  if (checked.ok()) {
    absl::ReaderMutexLock lock(&mu_);
    absl::MutexLock wait_lock(&wait_mu_);
    checked = CheckWorkerLocked(request->worker_index(), /*allow_none=*/true);
    if (checked.ok() && !ReadyLocked(*request)) {
      full = static_cast<int64_t>(waiters_.size()) >= options_.max_parked_pulls;
      if (!full) {
        const uint64_t ticket = next_ticket_++;
        waiters_.push_back({ticket, *request, response, std::move(done), absl::Now()});
        ++parked_pulls_;
        return ticket;
      }
    }
  }
  if (!checked.ok()) {
    done(checked);
    return 0;
  }
  if (full) {
    done(absl::ResourceExhaustedError(absl::StrCat(
        "this ps already holds ", options_.max_parked_pulls,
        " pulls waiting for a version or clock (--max_parked_pulls); pull again later")));
    return 0;
  }
  done(Pull(request->names(), response));
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
  // PullWhenReady copies the request when it parks.
  return PullWhenReady(&pull, response, std::move(done));
}

void VariableStore::WakeWaiters() {
  std::vector<Waiter> ready;
  {
    absl::ReaderMutexLock lock(&mu_);
    absl::MutexLock wait_lock(&wait_mu_);
    if (waiters_.empty()) return;
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < waiters_.size();) {
      if (ReadyLocked(waiters_[i].request)) {
        parked_seconds_ += absl::ToDoubleSeconds(now - waiters_[i].since);
        ready.push_back(std::move(waiters_[i]));
        waiters_.erase(waiters_.begin() + i);
      } else {
        ++i;
      }
    }
  }
  for (Waiter& w : ready) w.done(Pull(w.request.names(), w.response));
}

bool VariableStore::CancelWaiter(uint64_t ticket) {
  absl::MutexLock wait_lock(&wait_mu_);
  for (size_t i = 0; i < waiters_.size(); ++i) {
    if (waiters_[i].ticket == ticket) {
      parked_seconds_ += absl::ToDoubleSeconds(absl::Now() - waiters_[i].since);
      waiters_.erase(waiters_.begin() + i);
      return true;
    }
  }
  return false;
}

void VariableStore::CancelAllWaiters(const absl::Status& status) {
  std::vector<Waiter> all;
  {
    absl::MutexLock wait_lock(&wait_mu_);
    all.swap(waiters_);
  }
  for (Waiter& w : all) w.done(status);
}

int VariableStore::ExpireParked(absl::Duration max_wait) {
  std::vector<Waiter> expired;
  {
    absl::MutexLock wait_lock(&wait_mu_);
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < waiters_.size();) {
      if (now - waiters_[i].since > max_wait) {
        parked_seconds_ += absl::ToDoubleSeconds(now - waiters_[i].since);
        expired.push_back(std::move(waiters_[i]));
        waiters_.erase(waiters_.begin() + i);
      } else {
        ++i;
      }
    }
  }
  for (Waiter& w : expired) {
    w.done(absl::DeadlineExceededError(absl::StrCat(
        "this pull waited ", absl::FormatDuration(max_wait),
        " (--max_park_s) for a version or clock that did not come; pull again")));
  }
  return static_cast<int>(expired.size());
}

}  // namespace pst::ps
