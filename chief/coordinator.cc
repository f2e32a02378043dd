#include "chief/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pst::chief {

Coordinator::Coordinator(proto::ClusterState state, absl::Duration peer_timeout)
    : peer_timeout_(peer_timeout), state_(std::move(state)) {
  state_.set_phase(proto::PHASE_INIT);
  workers_.resize(std::max(0, state_.num_workers()));
}

void Coordinator::SetPhase(proto::Phase phase) {
  absl::MutexLock lock(&mu_);
  state_.set_phase(phase);
}

proto::ClusterState Coordinator::State() const {
  absl::MutexLock lock(&mu_);
  proto::ClusterState state = state_;
  state.set_global_step(GlobalStepLocked());
  return state;
}

absl::StatusOr<proto::ClusterState> Coordinator::Register(const proto::RegisterRequest& request,
                                                          absl::Time now) {
  absl::MutexLock lock(&mu_);
  const int index = request.worker_index();
  if (index < 0 || index >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("worker index ", index, " is out of range: the ",
                                                   "cluster has ", workers_.size(), " worker(s)"));
  }
  if (state_.phase() == proto::PHASE_INIT) {
    return absl::UnavailableError("the cluster is still initializing its variables; retry");
  }
  if (state_.phase() == proto::PHASE_DONE) {
    return absl::FailedPreconditionError("the job is already done");
  }
  WorkerState& worker = workers_[index];
  worker = WorkerState();
  worker.registered = true;
  worker.incarnation = request.incarnation();
  worker.last_seen = now;
  proto::ClusterState state = state_;
  state.set_global_step(GlobalStepLocked());
  return state;
}

absl::StatusOr<Coordinator::WorkerState*> Coordinator::FindWorker(int index, uint64_t incarnation) {
  if (index < 0 || index >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("worker index ", index, " is out of range"));
  }
  WorkerState& worker = workers_[index];
  if (!worker.registered) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", index, " has not registered"));
  }
  if (worker.incarnation != incarnation) {
    return absl::AbortedError(absl::StrCat("worker ", index, " incarnation ", incarnation,
                                           " is stale; the registered one is ",
                                           worker.incarnation));
  }
  return &worker;
}

void Coordinator::Record(WorkerState* worker, const proto::HeartbeatRequest& progress,
                         absl::Time now) {
  worker->last_seen = now;
  worker->steps = std::max(worker->steps, progress.steps());
  worker->version = std::max(worker->version, progress.version());
  worker->examples = std::max(worker->examples, progress.examples());
  worker->epoch = progress.epoch();
  if (progress.loss() > 0) {
    worker->loss = progress.loss();
    worker->has_loss = true;
  }
}

absl::StatusOr<proto::HeartbeatResponse> Coordinator::Heartbeat(
    const proto::HeartbeatRequest& request, absl::Time now) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<WorkerState*> worker = FindWorker(request.worker_index(), request.incarnation());
  if (!worker.ok()) return worker.status();
  Record(*worker, request, now);
  proto::HeartbeatResponse response;
  response.set_phase(state_.phase());
  response.set_global_step(GlobalStepLocked());
  const int64_t max_steps = state_.training().max_steps();
  response.set_should_stop(!stop_reason_.empty() || state_.phase() == proto::PHASE_DONE ||
                           (max_steps > 0 && response.global_step() >= max_steps));
  return response;
}

absl::Status Coordinator::WorkerDone(const proto::WorkerDoneRequest& request, absl::Time now) {
  absl::MutexLock lock(&mu_);
  const proto::HeartbeatRequest& progress = request.final_progress();
  absl::StatusOr<WorkerState*> worker = FindWorker(progress.worker_index(), progress.incarnation());
  if (!worker.ok()) return worker.status();
  Record(*worker, progress, now);
  (*worker)->done = true;
  (*worker)->completed = request.completed();
  return absl::OkStatus();
}

void Coordinator::RequestStop(std::string reason) {
  absl::MutexLock lock(&mu_);
  if (stop_reason_.empty()) stop_reason_ = reason.empty() ? "stop requested" : std::move(reason);
}

int64_t Coordinator::GlobalStepLocked() const {
  int64_t step = 0;
  for (const WorkerState& w : workers_) step = std::max(step, w.version);
  return step;
}

bool Coordinator::AllDoneLocked() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const WorkerState& w) { return w.done; });
}

Coordinator::Snapshot Coordinator::Check(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  Snapshot s;
  s.phase = state_.phase();
  s.global_step = GlobalStepLocked();
  for (const WorkerState& w : workers_) s.pushes += w.steps;
  double loss_sum = 0;
  int losses = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const WorkerState& w = workers_[i];
    s.examples += w.examples;
    s.epoch = std::max(s.epoch, w.epoch);
    if (w.has_loss) {
      loss_sum += w.loss;
      ++losses;
    }
    if (w.registered) ++s.registered;
    if (!w.done) s.active.push_back(static_cast<int>(i));
    if (w.done) {
      ++s.done;
      if (!w.completed) ++s.left_early;
    } else if (w.registered && now - w.last_seen > peer_timeout_) {
      s.silent.push_back(static_cast<int>(i));
    }
  }
  s.loss = losses > 0 ? loss_sum / losses : 0;
  s.all_done = AllDoneLocked();
  return s;
}

bool Coordinator::WaitAllDone(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto all_done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return AllDoneLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&all_done), timeout);
}

}  // namespace pst::chief
