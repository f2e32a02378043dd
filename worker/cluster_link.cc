#include "worker/cluster_link.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/grpc_ps_control.h"
#include "client/grpc_ps_transport.h"
#include "common/logging.h"
#include "common/ps_control.h"
#include "common/status_macros.h"

namespace pst::worker {

void Progress::Begin(int64_t generation, int64_t position) {
  absl::MutexLock lock(&mu_);
  if (begun_ && generation != generation_) {
    left_.emplace();
    left_->set_generation(generation_);
    left_->set_position(position_);
    left_->set_version(version_);
    version_ = 0;  // the restored ps's versions count from here
  }
  begun_ = true;
  generation_ = generation;
  position_ = position;
  waiting_at_epoch_end_ = 0;
}

void Progress::SetWaitingAtEpochEnd(int epoch) {
  absl::MutexLock lock(&mu_);
  waiting_at_epoch_end_ = epoch;
}

int Progress::waiting_at_epoch_end() const {
  absl::MutexLock lock(&mu_);
  return waiting_at_epoch_end_;
}

void Progress::Step(int64_t examples, float loss, int epoch, int64_t version, int64_t position) {
  absl::MutexLock lock(&mu_);
  version_ = std::max(version_, version);
  ++steps_;
  examples_ += examples;
  loss_sum_ += loss;
  ++loss_count_;
  epoch_ = epoch;
  position_ = position;
}

int64_t Progress::position() const {
  absl::MutexLock lock(&mu_);
  return position_;
}

int64_t Progress::steps() const {
  absl::MutexLock lock(&mu_);
  return steps_;
}

void Progress::Report(proto::HeartbeatRequest* request) {
  absl::MutexLock lock(&mu_);
  request->set_steps(steps_);
  request->set_version(version_);
  request->set_examples(examples_);
  request->set_epoch(epoch_);
  request->set_position(position_);
  request->set_generation(generation_);
  request->set_waiting_at_epoch_end(waiting_at_epoch_end_);
  if (left_.has_value()) *request->mutable_left() = *left_;
  if (loss_count_ > 0) request->set_loss(static_cast<float>(loss_sum_ / loss_count_));
  loss_sum_ = 0;
  loss_count_ = 0;
}

void CoordinatorView::Update(proto::Phase phase, int64_t generation, int64_t position,
                             bool should_stop, int epochs_released) {
  absl::MutexLock lock(&mu_);
  state_.phase = phase;
  state_.generation = generation;
  state_.position = position;
  state_.should_stop = state_.should_stop || should_stop;
  state_.epochs_released = epochs_released;
  ++state_.updates;
}

CoordinatorView::State CoordinatorView::Get() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

CoordinatorView::State CoordinatorView::WaitForUpdate(uint64_t seen,
                                                      absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return state_.updates != seen; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return state_;
}

bool Retryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    // A ps that restarted and has no variables yet, or is being restored.
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

namespace {

// Registers with the coordinator, retrying while it is not up yet (or is
// initializing or recovering) until `deadline`.
absl::StatusOr<proto::RegisterResponse> CallRegister(client::CoordinatorClient* coordinator,
                                                     const std::string& address,
                                                     const proto::RegisterRequest& request,
                                                     absl::Time deadline,
                                                     const common::StopSignal& stop) {
  proto::RegisterResponse response;
  PST_RETURN_IF_ERROR(CallCoordinatorUntil(
      [&](absl::Duration timeout) -> absl::Status {
        PST_ASSIGN_OR_RETURN(response, coordinator->Register(request, timeout));
        return absl::OkStatus();
      },
      address, deadline, stop, "registering", ""));
  return response;
}

// Where this worker's last push left its data, as the ps recorded it in
// `generation` (-1 when none did): exact, where the coordinator only knows
// the last position a heartbeat carried.
int64_t PositionOnPs(common::PsControl& ps, int worker_index, int64_t generation) {
  int64_t position = -1;
  for (int i = 0; i < ps.num_ps(); ++i) {
    proto::HealthRequest request;
    request.set_caller("worker");
    absl::StatusOr<proto::HealthResponse> answer = ps.Health(i, request, absl::Seconds(5));
    if (!answer.ok()) continue;
    const proto::HealthResponse& health = *answer;
    if (health.generation() != generation) continue;
    auto it = health.worker_positions().find(worker_index);
    if (it != health.worker_positions().end()) position = std::max(position, it->second);
  }
  return position;
}

}  // namespace

absl::Status CallCoordinatorUntil(const std::function<absl::Status(absl::Duration)>& call,
                                  const std::string& address, absl::Time deadline,
                                  const common::StopSignal& stop, absl::string_view stopped_before,
                                  absl::string_view what) {
  absl::Duration backoff = absl::Milliseconds(50);
  for (;; backoff = std::min(2 * backoff, absl::Seconds(1))) {
    absl::Status status = call(absl::Seconds(1));
    if (status.ok()) return absl::OkStatus();
    const bool retry = status.code() == absl::StatusCode::kUnavailable ||
                       status.code() == absl::StatusCode::kDeadlineExceeded;
    if (!retry) return status;
    if (stop.WaitFor(backoff))
      return absl::CancelledError(absl::StrCat("stopped before ", stopped_before));
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the coordinator at ", address,
                                                      " did not answer", what,
                                                      " in time: ", status.message()));
    }
  }
}

WorkerConnections GrpcConnections(client::CoordinatorClient* coordinator,
                                  const rpc::RpcSettings& settings) {
  WorkerConnections connections;
  connections.coordinator = coordinator;
  connections.ps_transport = [settings](const std::vector<std::string>& addresses,
                                        absl::Duration rpc_timeout) {
    return std::shared_ptr<common::PsTransport>(
        client::MakeGrpcPsTransport(addresses, settings, rpc_timeout));
  };
  connections.ps_control = [settings](const std::vector<std::string>& addresses) {
    return client::MakeGrpcPsControl(addresses, settings);
  };
  return connections;
}

absl::StatusOr<std::unique_ptr<ClusterLink>> ClusterLink::Register(
    const TrainerOptions& options, const WorkerConnections& connections,
    const common::StopSignal& stop) {
  std::unique_ptr<ClusterLink> link(new ClusterLink(options, connections, stop));
  proto::RegisterRequest first;
  first.set_worker_index(options.worker_index);
  first.set_incarnation(options.incarnation);
  first.set_position(-1);  // new: told where to start
  PST_ASSIGN_OR_RETURN(link->registered_,
                       CallRegister(connections.coordinator, options.coordinator_address, first,
                                    absl::Now() + options.startup_timeout, stop));
  const proto::ClusterState& state = link->state();
  // A restarted worker: the ps know exactly where its last push left off.
  link->start_ = link->registered_.position();
  const int64_t on_ps = PositionOnPs(*connections.ps_control(link->ps_addresses()),
                                     options.worker_index, state.generation());
  if (on_ps > link->start_) {
    spdlog::info("the ps took this worker's pushes up to data position {}: going on from there",
                 on_ps);
    link->start_ = on_ps;
  }
  link->routes_ = client::ShardRoutes::FromPlan(state.plan(), state.routing_version());
  link->progress_.Begin(state.generation(), link->start_);
  link->view_.Update(state.phase(), state.generation(), link->start_, false,
                     /*epochs_released=*/0);
  return link;
}

ClusterLink::~ClusterLink() { StopHeartbeats(); }

std::vector<std::string> ClusterLink::ps_addresses() const {
  return std::vector<std::string>(state().ps_addresses().begin(), state().ps_addresses().end());
}

void ClusterLink::Start() {
  if (!heartbeat_.joinable() && !loop_done_.HasBeenNotified()) {
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  }
}

void ClusterLink::StopHeartbeats() {
  if (routes_ != nullptr) routes_->SetHold(false);
  {
    absl::MutexLock lock(&beat_mu_);
    beats_stopped_ = true;
  }
  if (!loop_done_.HasBeenNotified()) loop_done_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
}

// How often a worker holding at an epoch's end asks whether the chief has
// released it: the chief saves as soon as the last worker arrives, so this
// bounds the pause each such epoch costs.
constexpr absl::Duration kHoldingBeat = absl::Milliseconds(5);

bool ClusterLink::AwaitBeat() {
  const absl::Duration every = progress_.waiting_at_epoch_end() > 0
                                   ? std::min(kHoldingBeat, options_.heartbeat_interval)
                                   : options_.heartbeat_interval;
  absl::MutexLock lock(&beat_mu_);
  auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(beat_mu_) {
    return beats_stopped_ || beat_now_;
  };
  beat_mu_.AwaitWithTimeout(absl::Condition(&woken), every);
  beat_now_ = false;
  return !beats_stopped_;
}

void ClusterLink::BeatNow() {
  absl::MutexLock lock(&beat_mu_);
  beat_now_ = true;
}

// Heartbeats: progress out; phase, generation and "should stop" back. A
// coordinator that no longer knows this worker (a restarted chief) is told
// where it is. Without an answer for recovery_timeout, give up.
void ClusterLink::HeartbeatLoop() {
  client::CoordinatorClient* const coordinator = connections_.coordinator;
  absl::Time last_ok = absl::Now();
  while (AwaitBeat()) {
    proto::HeartbeatRequest request;
    request.set_worker_index(options_.worker_index);
    request.set_incarnation(options_.incarnation);
    progress_.Report(&request);
    absl::StatusOr<proto::HeartbeatResponse> answer =
        coordinator->Heartbeat(request, options_.heartbeat_interval + absl::Seconds(1));
    if (answer.ok()) {
      const proto::HeartbeatResponse& response = *answer;
      last_ok = absl::Now();
      if (response.shards_size() > 0 &&
          routes_->Set(response.routing_version(), response.shards())) {
        spdlog::warn("shards moved (routing version {}): requests go to their new primaries",
                     response.routing_version());
      }
      // Calls held for a failover fail instead while the ps are restored.
      routes_->SetHold(response.phase() == proto::PHASE_RUNNING && !response.should_stop());
      view_.Update(response.phase(), response.generation(), response.position(),
                   response.should_stop(), response.epochs_released());
      continue;
    }
    const absl::Status& status = answer.status();
    if (status.code() == absl::StatusCode::kFailedPrecondition) {
      proto::RegisterRequest again;
      again.set_worker_index(options_.worker_index);
      again.set_incarnation(options_.incarnation);
      again.set_position(request.position());
      again.set_generation(request.generation());
      again.set_finished(finished_.load());
      absl::StatusOr<proto::RegisterResponse> r =
          CallRegister(coordinator, options_.coordinator_address, again, absl::Now(), stop_);
      if (r.ok()) {
        spdlog::info("registered again with a restarted coordinator (generation {})",
                     r->state().generation());
        last_ok = absl::Now();
        routes_->Set(r->state().routing_version(), r->state().plan().shards());
        view_.Update(r->state().phase(), r->state().generation(), r->position(), false,
                     /*epochs_released=*/0);
        continue;
      }
    } else if (status.code() == absl::StatusCode::kAborted) {
      heartbeat_error_ = absl::AlreadyExistsError(absl::StrCat(
          "another process registered as worker ", options_.worker_index, ": ", status.message()));
      lost_coordinator_.Stop("replaced");
      return;
    }
    if (absl::Now() - last_ok > options_.recovery_timeout) {
      heartbeat_error_ = absl::UnavailableError(
          absl::StrCat("lost the coordinator at ", options_.coordinator_address, " for ",
                       absl::FormatDuration(options_.recovery_timeout),
                       " (--recovery_timeout_s): ", status.message()));
      lost_coordinator_.Stop("lost the coordinator");
      return;
    }
  }
}

CoordinatorView::State ClusterLink::AwaitCluster(CoordinatorView::State v, int64_t generation,
                                                absl::Time failing_since, absl::Time retry_at) {
  const int64_t routes = routes_ == nullptr ? 0 : routes_->version();
  for (;;) {
    const absl::Time now = absl::Now();
    if (stop_.stopped() || lost_coordinator_.stopped() || v.should_stop) return v;
    if (now - failing_since > options_.recovery_timeout) return v;
    // A shard moved to a new primary (a failover): retry there at once.
    const bool moved = routes_ != nullptr && routes_->version() != routes;
    if (v.phase != proto::PHASE_RECOVERING &&
        (v.generation != generation || now >= retry_at || moved)) {
      return v;
    }
    // While the chief restores the ps, wait a heartbeat at a time.
    v = view_.WaitForUpdate(v.updates, v.phase == proto::PHASE_RECOVERING
                                           ? options_.heartbeat_interval
                                           : retry_at - now);
  }
}

int ClusterLink::EpochEndToHold(int64_t position, int64_t per_epoch) const {
  if (per_epoch <= 0 || position <= 0 || position % per_epoch != 0) return 0;
  const int64_t epoch = position / per_epoch;
  if (epoch >= training().epochs()) return 0;  // the job's end, not an epoch's
  const proto::ClusterState& s = state();
  auto every = [epoch](int n) { return n > 0 && epoch % n == 0; };
  if (!every(s.checkpoint_every_epochs()) && !every(s.eval_every_epochs())) return 0;
  if (view_.Get().epochs_released >= epoch) return 0;
  return static_cast<int>(epoch);
}

CoordinatorView::State ClusterLink::AwaitEpochRelease(int epoch, CoordinatorView::State v,
                                                      int64_t generation) {
  progress_.SetWaitingAtEpochEnd(epoch);
  BeatNow();
  spdlog::info("at the end of epoch {}: waiting for the chief's checkpoint or evaluation", epoch);
  while (!stop_.stopped() && !lost_coordinator_.stopped() && !v.should_stop &&
         v.generation == generation && v.phase != proto::PHASE_RECOVERING &&
         v.epochs_released < epoch) {
    v = view_.WaitForUpdate(v.updates, options_.heartbeat_interval);
  }
  progress_.SetWaitingAtEpochEnd(0);
  return v;
}

CoordinatorView::State ClusterLink::AwaitEnd(CoordinatorView::State v, int64_t generation) {
  while (!stop_.stopped() && !lost_coordinator_.stopped() && v.phase != proto::PHASE_DONE &&
         v.generation == generation && v.phase != proto::PHASE_RECOVERING) {
    v = view_.WaitForUpdate(v.updates, options_.heartbeat_interval);
  }
  return v;
}

absl::Status ClusterLink::ReportDone(bool completed, const std::string& reason,
                                     const proto::StepTimes* times) {
  proto::WorkerDoneRequest done;
  if (times != nullptr) *done.mutable_step_times() = *times;
  done.mutable_final_progress()->set_worker_index(options_.worker_index);
  done.mutable_final_progress()->set_incarnation(options_.incarnation);
  progress_.Report(done.mutable_final_progress());
  done.set_completed(completed);
  done.set_reason(reason);
  return connections_.coordinator->WorkerDone(done, absl::Seconds(5));
}

proto::StepTimes StepTimesProto(const models::StepTimes& times,
                                const client::PsClient::WireBytes& wire) {
  proto::StepTimes out;
  out.set_steps(times.steps);
  out.set_compute_seconds(absl::ToDoubleSeconds(times.compute));
  out.set_communication_seconds(absl::ToDoubleSeconds(times.communication));
  out.set_exposed_seconds(absl::ToDoubleSeconds(times.waited));
  out.set_pushed_bytes(wire.pushed);
  out.set_pulled_bytes(wire.pulled);
  return out;
}

}  // namespace pst::worker
