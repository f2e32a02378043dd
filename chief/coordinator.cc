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
  state.set_generation(generation_);
  return state;
}

void Coordinator::SetGeneration(int64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
}

int64_t Coordinator::SetShards(
    const google::protobuf::RepeatedPtrField<proto::ShardCopies>& shards) {
  absl::MutexLock lock(&mu_);
  *state_.mutable_plan()->mutable_shards() = shards;
  state_.set_routing_version(state_.routing_version() + 1);
  return state_.routing_version();
}

int64_t Coordinator::BeginRecovery() {
  absl::MutexLock lock(&mu_);
  state_.set_phase(proto::PHASE_RECOVERING);
  // A worker that finished trained batches the restore takes back: it
  // trains again from its position in the checkpoint. One that left early
  // (given up, or stopped on an error) stays gone.
  for (WorkerState& w : workers_) {
    if (w.done && w.completed) {
      w.done = false;
      w.completed = false;
    }
    w.position_before_restore = w.position;
    w.version_before_restore = w.version;
    w.waiting_at_epoch_end = 0;
  }
  return ++generation_;
}

void Coordinator::ResetProgress(int64_t step, const std::vector<int64_t>& positions) {
  absl::MutexLock lock(&mu_);
  const bool have_positions = positions.size() == workers_.size();
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerState& w = workers_[i];
    w.version = step;
    if (have_positions) w.position = positions[i];
    w.restored_position = w.position;
    w.redone = std::max<int64_t>(0, w.position_before_restore - w.position);
    w.redone_reported = false;
  }
  restored_generation_ = generation_;
}

void Coordinator::GiveUp(int index) {
  absl::MutexLock lock(&mu_);
  if (index < 0 || index >= static_cast<int>(workers_.size())) return;
  workers_[index].done = true;
  workers_[index].completed = false;
}

absl::StatusOr<int> Coordinator::ClaimWorkerIndex(const std::string& claimant) {
  if (claimant.empty()) return absl::InvalidArgumentError("a worker index claim needs a claimant");
  absl::MutexLock lock(&mu_);
  if (auto it = claims_.find(claimant); it != claims_.end()) return it->second;
  std::vector<bool> taken(workers_.size(), false);
  for (const auto& [name, index] : claims_) taken[index] = true;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (taken[i] || workers_[i].registered) continue;
    claims_.emplace(claimant, static_cast<int>(i));
    return static_cast<int>(i);
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "all ", workers_.size(), " worker indices are taken, so '", claimant,
      "' gets none: there are more worker replicas than TF_CONFIG lists workers (scale the "
      "service to the number of workers in its TF_CONFIG)"));
}

absl::StatusOr<proto::RegisterResponse> Coordinator::Register(const proto::RegisterRequest& request,
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
  if (state_.phase() == proto::PHASE_RECOVERING) {
    return absl::UnavailableError("the cluster is restoring its ps from a checkpoint; retry");
  }
  if (state_.phase() == proto::PHASE_DONE) {
    return absl::FailedPreconditionError("the job is already done");
  }
  WorkerState& worker = workers_[index];
  if (worker.registered && worker.incarnation != request.incarnation()) {
    // A restarted worker: its counters start again from zero.
    worker.earlier_steps += worker.steps;
    worker.earlier_examples += worker.examples;
    worker.steps = 0;
    worker.examples = 0;
  }
  // A live worker this coordinator did not know (the chief restarted) tells
  // where it is; a new one is told where to start.
  if (request.position() >= 0 && request.generation() == generation_) {
    worker.position = request.position();
  }
  worker.registered = true;
  // Finished in the ps's current generation: its steps are all on the ps.
  worker.done = request.finished() && request.generation() == generation_;
  worker.completed = worker.done;
  worker.incarnation = request.incarnation();
  worker.last_seen = now;
  proto::RegisterResponse response;
  *response.mutable_state() = state_;
  response.mutable_state()->set_global_step(GlobalStepLocked());
  response.mutable_state()->set_generation(generation_);
  response.set_position(worker.position);
  return response;
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
  worker->examples = std::max(worker->examples, progress.examples());
  // Where the worker is, and what it has seen, count only in the current
  // generation: a report from before a restore describes replaced state.
  if (progress.generation() != generation_) return;
  worker->waiting_at_epoch_end = progress.waiting_at_epoch_end();
  // The worker followed the latest restore: it had reached left.position
  // before it, so it trains the batches from its restored position on again.
  if (progress.has_left() && restored_generation_ == generation_ &&
      progress.left().generation() < generation_) {
    worker->redone = std::max<int64_t>(
        worker->redone, progress.left().position() - worker->restored_position);
    worker->version_before_restore =
        std::max(worker->version_before_restore, progress.left().version());
    worker->redone_reported = true;
  }
  worker->version = std::max(worker->version, progress.version());
  worker->position = std::max(worker->position, progress.position());
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
  // A worker given up on that speaks again takes part again.
  if ((*worker)->done && !(*worker)->completed) (*worker)->done = false;
  proto::HeartbeatResponse response;
  response.set_phase(state_.phase());
  response.set_global_step(GlobalStepLocked());
  response.set_generation(generation_);
  response.set_position((*worker)->position);
  response.set_epochs_released(epochs_released_);
  if (state_.plan().replicas() == 2) {
    response.set_routing_version(state_.routing_version());
    *response.mutable_shards() = state_.plan().shards();
  }
  const int64_t max_steps = state_.training().max_steps();
  response.set_should_stop(!stop_reason_.empty() || state_.phase() == proto::PHASE_DONE ||
                           (max_steps > 0 && response.global_step() >= max_steps));
  // Workers that finished wait for the end itself (with --max_steps,
  // should_stop comes before it).
  if (state_.phase() == proto::PHASE_DONE) (*worker)->saw_stop = true;
  return response;
}

absl::Status Coordinator::WorkerDone(const proto::WorkerDoneRequest& request, absl::Time now) {
  absl::MutexLock lock(&mu_);
  const proto::HeartbeatRequest& progress = request.final_progress();
  absl::StatusOr<WorkerState*> worker = FindWorker(progress.worker_index(), progress.incarnation());
  if (!worker.ok()) return worker.status();
  if (request.completed() && progress.generation() != generation_) {
    return absl::AbortedError(
        absl::StrCat("the ps were restored from a checkpoint (generation ", generation_,
                     ") while this worker finished in generation ", progress.generation(),
                     "; go on from position ", (*worker)->position));
  }
  Record(*worker, progress, now);
  (*worker)->done = true;
  (*worker)->completed = request.completed();
  if (request.has_step_times()) (*worker)->step_times = request.step_times();
  last_done_ = now;
  return absl::OkStatus();
}

void Coordinator::RequestStop(std::string reason) {
  absl::MutexLock lock(&mu_);
  if (stop_reason_.empty()) stop_reason_ = reason.empty() ? "stop requested" : std::move(reason);
}

int Coordinator::HeldEpochEndLocked() const {
  int held = 0;
  for (const WorkerState& w : workers_) {
    if (w.done) continue;
    if (!w.registered || w.waiting_at_epoch_end <= epochs_released_) return 0;
    if (held != 0 && w.waiting_at_epoch_end != held) return 0;
    held = w.waiting_at_epoch_end;
  }
  return held;
}

int Coordinator::HeldEpochEnd() const {
  absl::MutexLock lock(&mu_);
  return HeldEpochEndLocked();
}

void Coordinator::ReleaseEpoch(int epoch) {
  absl::MutexLock lock(&mu_);
  epochs_released_ = std::max(epochs_released_, epoch);
}

void Coordinator::ResetEpochsReleased(int epoch) {
  absl::MutexLock lock(&mu_);
  epochs_released_ = epoch;
}

Coordinator::Redone Coordinator::StepsRedone() const {
  absl::MutexLock lock(&mu_);
  Redone r;
  r.generation = restored_generation_;
  for (const WorkerState& w : workers_) {
    r.steps.push_back(w.redone);
    r.known.push_back(w.redone_reported || (w.done && !w.completed));
    r.step_before = std::max(r.step_before, w.version_before_restore);
  }
  return r;
}

int64_t Coordinator::GlobalStepLocked() const {
  int64_t step = 0;
  for (const WorkerState& w : workers_) step = std::max(step, w.version);
  const bool probed = version_ceiling_ != std::numeric_limits<int64_t>::max();
  // Every worker done, nothing more is pushed: the ps' version is the step.
  // A worker's own report can trail it, as an async worker's last push is
  // answered before another's last push lands.
  if (probed && AllDoneLocked()) return version_ceiling_;
  return std::min(step, version_ceiling_);
}

void Coordinator::SetFinalCheckpointStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  state_.set_final_checkpoint_step(step);
}

void Coordinator::SetVersionCeiling(int64_t version) {
  absl::MutexLock lock(&mu_);
  version_ceiling_ = std::max<int64_t>(0, version);
}

bool Coordinator::AllDoneLocked() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const WorkerState& w) { return w.done; });
}

Coordinator::Snapshot Coordinator::Check(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  Snapshot s;
  s.phase = state_.phase();
  s.generation = generation_;
  s.global_step = GlobalStepLocked();
  double loss_sum = 0;
  int losses = 0;
  int min_epochs = state_.training().epochs();
  for (size_t i = 0; i < workers_.size(); ++i) {
    const WorkerState& w = workers_[i];
    s.pushes += w.earlier_steps + w.steps;
    s.examples += w.earlier_examples + w.examples;
    s.positions.push_back(w.position);
    s.step_times.push_back(w.step_times);
    s.epoch = std::max(s.epoch, w.epoch);
    if (w.has_loss) {
      loss_sum += w.loss;
      ++losses;
    }
    if (w.registered) ++s.registered;
    if (!w.done) min_epochs = std::min(min_epochs, w.epoch);
    if (w.done) {
      ++s.done;
      if (!w.completed) ++s.left_early;
    } else if (w.registered && now - w.last_seen > peer_timeout_) {
      s.silent.push_back(static_cast<int>(i));
      s.silent_for.push_back(now - w.last_seen);
    } else if (w.waiting_at_epoch_end <= epochs_released_) {
      s.active.push_back(static_cast<int>(i));
    } else {
      s.holding.push_back(static_cast<int>(i));  // active again once released
    }
  }
  s.epoch_end_held = HeldEpochEndLocked();
  s.epochs_completed = std::max(0, min_epochs);
  s.loss = losses > 0 ? loss_sum / losses : 0;
  s.all_done = AllDoneLocked();
  s.last_done = last_done_;
  return s;
}

bool Coordinator::WaitAllDone(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto all_done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return AllDoneLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&all_done), timeout);
}

bool Coordinator::WaitStopSeen(absl::Duration timeout) const {
  auto all_seen = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    for (const WorkerState& w : workers_) {
      // A worker that left early (done, not completed) is gone already.
      const bool left = w.done && !w.completed;
      if (w.registered && !left && now - w.last_seen <= peer_timeout_ && !w.saw_stop) {
        return false;
      }
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&all_seen), timeout);
}

}  // namespace pst::chief
