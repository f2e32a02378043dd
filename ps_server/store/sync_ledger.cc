#include "ps_server/store/sync_ledger.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/message_differencer.h"

namespace pst::ps {

using google::protobuf::util::MessageDifferencer;

SyncLedger::SyncLedger(int32_t max_workers, int64_t max_parked)
    : max_workers_(max_workers), max_parked_(max_parked) {}

absl::Status SyncLedger::CheckConfig(const proto::SyncConfig& sync) const {
  if (sync.num_workers() < 0 || sync.replicas_to_aggregate() < 0 || sync.staleness() < 0 ||
      sync.replicas_to_aggregate() > sync.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync config: need 0 <= replicas_to_aggregate <= num_workers and staleness >= 0; got ",
        sync.replicas_to_aggregate(), " of ", sync.num_workers(), ", staleness ",
        sync.staleness()));
  }
  if (sync.mode() != proto::ASYNC && sync.num_workers() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync config: mode ", proto::SyncMode_Name(sync.mode()), " needs num_workers >= 1"));
  }
  absl::MutexLock lock(&mu_);
  if (sync_set_ && !MessageDifferencer::Equals(sync_, sync)) {
    return absl::FailedPreconditionError(
        absl::StrCat("this ps already trains in mode ", proto::SyncMode_Name(sync_.mode()),
                     " with ", sync_.num_workers(), " worker(s); it cannot change to ",
                     proto::SyncMode_Name(sync.mode()), " with ", sync.num_workers()));
  }
  return absl::OkStatus();
}

void SyncLedger::SetConfigOnce(const proto::SyncConfig& sync) {
  absl::MutexLock lock(&mu_);
  if (sync_set_) return;
  sync_set_ = true;
  sync_ = sync;
  active_.assign(sync.num_workers(), true);
  clocks_.assign(sync.num_workers(), 0);
  const int r =
      sync.replicas_to_aggregate() > 0 ? sync.replicas_to_aggregate() : sync.num_workers();
  quorum_.store(std::max(1, r));
}

proto::SyncConfig SyncLedger::config() const {
  absl::MutexLock lock(&mu_);
  return sync_;
}

proto::SyncMode SyncLedger::mode() const {
  absl::MutexLock lock(&mu_);
  return sync_.mode();
}

absl::Status SyncLedger::CheckWorkerLocked(int32_t worker, bool allow_none) const {
  if (allow_none && worker == -1) return absl::OkStatus();
  const int32_t limit = sync_set_ && sync_.num_workers() > 0 ? sync_.num_workers() : max_workers_;
  if (worker < 0 || worker >= limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index ", worker, " is out of range: this job has ", limit, " worker(s)",
        allow_none ? " (-1: not a worker)" : ""));
  }
  return absl::OkStatus();
}

absl::Status SyncLedger::CheckWorker(int32_t worker, bool allow_none) const {
  absl::MutexLock lock(&mu_);
  return CheckWorkerLocked(worker, allow_none);
}

absl::StatusOr<proto::SyncMode> SyncLedger::BeginDensePush(int32_t worker, int32_t part,
                                                           uint64_t incarnation, int64_t step,
                                                           bool* duplicate) {
  *duplicate = false;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckWorkerLocked(worker, /*allow_none=*/false); !s.ok()) return s;
  const proto::SyncMode mode = sync_.mode();
  // A push is identified by (worker, incarnation, part, step) when it
  // carries an incarnation; SYNC recognizes repeats per variable version
  // instead (Variable::AddToAggregateLocked).
  if (mode != proto::SYNC && incarnation != 0) {
    PushKey& key = last_push_[{worker, part}];
    if (key.incarnation != incarnation) key = PushKey{incarnation, -1, -1};
    if (step <= key.dense_step) {
      *duplicate = true;
    } else {
      key.dense_step = step;
    }
  }
  return mode;
}

absl::StatusOr<bool> SyncLedger::BeginRowPush(int32_t worker, uint64_t incarnation,
                                              int64_t step, proto::SyncMode* mode) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckWorkerLocked(worker, /*allow_none=*/false); !s.ok()) return s;
  *mode = sync_.mode();
  if (incarnation == 0 || *mode == proto::SYNC) return false;
  PushKey& key = last_push_[{worker, 0}];
  if (key.incarnation != incarnation) key = PushKey{incarnation, -1, -1};
  if (step <= key.rows_step) return true;
  key.rows_step = step;
  return false;
}

void SyncLedger::EndDensePush(proto::SyncMode mode, int32_t worker, int64_t step,
                              int64_t position) {
  absl::MutexLock lock(&mu_);
  if (mode == proto::SSP && worker >= 0 && worker < static_cast<int>(clocks_.size())) {
    clocks_[worker] = std::max(clocks_[worker], step + 1);
  }
  // The batch is consumed, whether its gradient was applied, aggregated,
  // already there or too late: a restarted worker goes on after it.
  if (position >= 0 && worker >= 0) {
    int64_t& at = positions_[worker];
    at = std::max(at, position + 1);
  }
}

absl::Status SyncLedger::SetMembership(const proto::MembershipRequest& request) {
  absl::MutexLock lock(&mu_);
  if (request.replicas_to_aggregate() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "membership: replicas_to_aggregate must be >= 1, got ", request.replicas_to_aggregate()));
  }
  std::vector<bool> active(active_.size(), false);
  for (int32_t w : request.active_workers()) {
    if (w < 0 || w >= static_cast<int>(active.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "membership: worker ", w, " is out of range: this job has ", active.size(),
          " worker(s)"));
    }
    active[w] = true;
  }
  active_ = std::move(active);
  const int live = std::max(1, static_cast<int>(request.active_workers_size()));
  quorum_.store(std::min(request.replicas_to_aggregate(), live));
  return absl::OkStatus();
}

int64_t SyncLedger::MinActiveClockLocked() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (active_[w]) min_clock = std::min(min_clock, clocks_[w]);
  }
  return min_clock;
}

bool SyncLedger::ReadyLocked(const proto::PullRequest& request, VersionsReached reached) {
  if (request.worker_index() < 0 || !sync_set_) return true;
  switch (sync_.mode()) {
    case proto::SYNC:
      return reached(request);
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

absl::StatusOr<uint64_t> SyncLedger::ParkUnlessReady(const proto::PullRequest& request,
                                                     proto::PullResponse* response, Done* done,
                                                     VersionsReached reached) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckWorkerLocked(request.worker_index(), /*allow_none=*/true); !s.ok()) {
    return s;
  }
  if (ReadyLocked(request, reached)) return 0;
  if (static_cast<int64_t>(waiters_.size()) >= max_parked_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this ps already holds ", max_parked_,
        " pulls waiting for a version or clock (--max_parked_pulls); pull again later"));
  }
  const uint64_t ticket = next_ticket_++;
  waiters_.push_back({ticket, request, response, std::move(*done), absl::Now()});
  ++parked_pulls_;
  return ticket;
}

template <typename Pred>
std::vector<SyncLedger::Waiter> SyncLedger::TakeLocked(absl::Time now, Pred take) {
  std::vector<Waiter> taken;
  for (size_t i = 0; i < waiters_.size();) {
    if (take(waiters_[i])) {
      parked_seconds_ += absl::ToDoubleSeconds(now - waiters_[i].since);
      taken.push_back(std::move(waiters_[i]));
      waiters_.erase(waiters_.begin() + i);
    } else {
      ++i;
    }
  }
  return taken;
}

std::vector<SyncLedger::Waiter> SyncLedger::TakeReady(VersionsReached reached) {
  absl::MutexLock lock(&mu_);
  if (waiters_.empty()) return {};
  return TakeLocked(absl::Now(), [&](const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ReadyLocked(w.request, reached);
  });
}

bool SyncLedger::Cancel(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  return !TakeLocked(absl::Now(), [&](const Waiter& w) { return w.ticket == ticket; }).empty();
}

std::vector<SyncLedger::Waiter> SyncLedger::TakeAll() {
  std::vector<Waiter> all;
  absl::MutexLock lock(&mu_);
  all.swap(waiters_);
  return all;
}

std::vector<SyncLedger::Waiter> SyncLedger::TakeExpired(absl::Duration max_wait) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  return TakeLocked(now, [&](const Waiter& w) { return now - w.since > max_wait; });
}

std::vector<proto::WorkerCut> SyncLedger::Cut() const {
  absl::flat_hash_map<int32_t, proto::WorkerCut> workers;
  auto at = [&](int32_t w) -> proto::WorkerCut& {
    auto [it, fresh] = workers.try_emplace(w);
    if (fresh) {
      it->second.set_worker_index(w);
      it->second.set_position(-1);
      it->second.set_min_step(std::numeric_limits<int64_t>::max());
      it->second.set_max_step(-1);
      it->second.set_rows_step(-1);
    }
    return it->second;
  };
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, push] : last_push_) {
      proto::WorkerCut& c = at(key.first);
      if (push.dense_step >= 0) {
        c.set_min_step(std::min(c.min_step(), push.dense_step));
        c.set_max_step(std::max(c.max_step(), push.dense_step));
      }
      if (key.second == 0) c.set_rows_step(std::max(c.rows_step(), push.rows_step));
    }
    for (const auto& [w, position] : positions_) at(w).set_position(position);
  }
  std::vector<proto::WorkerCut> cut;
  for (auto& [w, c] : workers) {
    if (c.max_step() < 0) c.set_min_step(-1);
    cut.push_back(std::move(c));
  }
  std::sort(cut.begin(), cut.end(),
            [](const auto& a, const auto& b) { return a.worker_index() < b.worker_index(); });
  return cut;
}

std::vector<SyncLedger::Waiter> SyncLedger::Reset() {
  std::vector<Waiter> parked;
  absl::MutexLock lock(&mu_);
  std::fill(clocks_.begin(), clocks_.end(), 0);
  last_push_.clear();
  positions_.clear();
  parked.swap(waiters_);
  return parked;
}

void SyncLedger::Export(proto::StoreModeState* mode) const {
  absl::MutexLock lock(&mu_);
  mode->set_quorum(quorum_.load());
  for (bool a : active_) mode->add_active(a);
  for (int64_t c : clocks_) mode->add_clocks(c);
  for (const auto& [key, push] : last_push_) {
    proto::PushMark* mark = mode->add_pushes();
    mark->set_worker(key.first);
    mark->set_part(key.second);
    mark->set_incarnation(push.incarnation);
    mark->set_dense_step(push.dense_step);
    mark->set_rows_step(push.rows_step);
  }
  for (const auto& [w, position] : positions_) (*mode->mutable_positions())[w] = position;
}

absl::Status SyncLedger::Load(const proto::StoreModeState& mode) {
  absl::MutexLock lock(&mu_);
  if (mode.active_size() != static_cast<int>(active_.size()) ||
      mode.clocks_size() != static_cast<int>(clocks_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("store state: the mode holds ",
                                                   mode.active_size(), " worker(s), the store ",
                                                   active_.size()));
  }
  if (mode.generation() < 0 || mode.quorum() < 1) {
    return absl::InvalidArgumentError("store state: a bad generation or quorum");
  }
  quorum_.store(mode.quorum());
  for (int w = 0; w < mode.active_size(); ++w) active_[w] = mode.active(w);
  for (int w = 0; w < mode.clocks_size(); ++w) clocks_[w] = mode.clocks(w);
  for (const proto::PushMark& mark : mode.pushes()) {
    last_push_[{mark.worker(), mark.part()}] =
        PushKey{mark.incarnation(), mark.dense_step(), mark.rows_step()};
  }
  for (const auto& [w, position] : mode.positions()) positions_[w] = position;
  return absl::OkStatus();
}

SyncLedger::Figures SyncLedger::GetFigures() const {
  absl::MutexLock lock(&mu_);
  Figures f;
  f.parked_pulls = parked_pulls_;
  f.parked_seconds = parked_seconds_;
  const absl::Time now = absl::Now();
  for (const Waiter& w : waiters_) f.parked_seconds += absl::ToDoubleSeconds(now - w.since);
  f.max_clock_gap = max_clock_gap_;
  f.positions = positions_;
  return f;
}

}  // namespace pst::ps
