#include "worker/trainer.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "client/grpc_coordinator_client.h"
#include "client/grpc_ps_control.h"
#include "client/grpc_ps_transport.h"
#include "client/ps_client.h"
#include "common/metrics.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "common/logging.h"
#include "common/ps_control.h"
#include "common/status_macros.h"
#include "models/train_loop.h"

namespace pst::worker {
namespace {

// Progress shared between the training loop and the heartbeat thread.
class Progress {
 public:
  // A new attempt: training in `generation` from data position `position`.
  void Begin(int64_t generation, int64_t position) {
    absl::MutexLock lock(&mu_);
    generation_ = generation;
    position_ = position;
  }
  void Step(int64_t examples, float loss, int epoch, int64_t version, int64_t position) {
    absl::MutexLock lock(&mu_);
    version_ = std::max(version_, version);
    ++steps_;
    examples_ += examples;
    loss_sum_ += loss;
    ++loss_count_;
    epoch_ = epoch;
    position_ = position;
  }
  int64_t position() const {
    absl::MutexLock lock(&mu_);
    return position_;
  }
  int64_t steps() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  int64_t generation() const {
    absl::MutexLock lock(&mu_);
    return generation_;
  }
  // Fills `request` and resets the running loss.
  void Report(proto::HeartbeatRequest* request) {
    absl::MutexLock lock(&mu_);
    request->set_steps(steps_);
    request->set_version(version_);
    request->set_examples(examples_);
    request->set_epoch(epoch_);
    request->set_position(position_);
    request->set_generation(generation_);
    if (loss_count_ > 0) request->set_loss(static_cast<float>(loss_sum_ / loss_count_));
    loss_sum_ = 0;
    loss_count_ = 0;
  }

 private:
  mutable absl::Mutex mu_;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t examples_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int loss_count_ ABSL_GUARDED_BY(mu_) = 0;
  int epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t position_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

// What the coordinator last said, from heartbeats and registrations.
class CoordinatorView {
 public:
  struct State {
    proto::Phase phase = proto::PHASE_RUNNING;
    int64_t generation = 0;
    int64_t position = 0;  // where to go on from in `generation`
    bool should_stop = false;
    uint64_t updates = 0;  // bumped by every answer
  };
  void Update(proto::Phase phase, int64_t generation, int64_t position, bool should_stop) {
    absl::MutexLock lock(&mu_);
    state_.phase = phase;
    state_.generation = generation;
    state_.position = position;
    state_.should_stop = state_.should_stop || should_stop;
    ++state_.updates;
  }
  State Get() const {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  // Waits until the coordinator answers again after `seen`, or `timeout`.
  State WaitForUpdate(uint64_t seen, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return state_.updates != seen; };
    mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
    return state_;
  }

 private:
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_);
};

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

// Makes one call to the coordinator (`call`, given a 1 s timeout, waiting
// for a coordinator not up yet) until it is answered with anything but
// UNAVAILABLE or DEADLINE_EXCEEDED (the coordinator is not up yet, or is
// initializing or recovering), backing off up to 1 s between tries, until
// `deadline`. The errors say "stopped before <stopped_before>" and "the
// coordinator at <address> did not answer<what> in time".
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

// Registers with the coordinator, retrying while it is not up yet (or is
// initializing or recovering) until `deadline`.
absl::StatusOr<proto::RegisterResponse> Register(CoordinatorClient* coordinator,
                                                 const TrainerOptions& options,
                                                 const proto::RegisterRequest& request,
                                                 absl::Time deadline,
                                                 const common::StopSignal& stop) {
  proto::RegisterResponse response;
  PST_RETURN_IF_ERROR(CallCoordinatorUntil(
      [&](absl::Duration timeout) -> absl::Status {
        PST_ASSIGN_OR_RETURN(response, coordinator->Register(request, timeout));
        return absl::OkStatus();
      },
      options.coordinator_address, deadline, stop, "registering", ""));
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

absl::Status RunWorker(const TrainerOptions& options, const common::StopSignal& stop) {
  const std::unique_ptr<CoordinatorClient> coordinator =
      MakeGrpcCoordinatorClient(options.coordinator_address);
  WorkerConnections connections;
  connections.coordinator = coordinator.get();
  connections.ps_transport = [](const std::vector<std::string>& addresses,
                                absl::Duration rpc_timeout) {
    return std::shared_ptr<common::PsTransport>(MakeGrpcPsTransport(addresses, rpc_timeout));
  };
  connections.ps_control = MakeGrpcPsControl;
  return RunWorker(options, connections, stop);
}

absl::Status RunWorker(const TrainerOptions& options, const WorkerConnections& connections,
                       const common::StopSignal& stop) {
  CoordinatorClient* const coordinator = connections.coordinator;
  proto::RegisterRequest first;
  first.set_worker_index(options.worker_index);
  first.set_incarnation(options.incarnation);
  first.set_position(-1);  // new: told where to start
  PST_ASSIGN_OR_RETURN(
      proto::RegisterResponse registered,
      Register(coordinator, options, first, absl::Now() + options.startup_timeout, stop));
  const proto::ClusterState& state = registered.state();
  const proto::TrainingConfig& training = state.training();
  spdlog::info(
      "registered with the coordinator at {}: {} worker(s), {} ps, model {}, batch {}, "
      "{} epoch(s), starting at data position {}",
      options.coordinator_address, state.num_workers(), state.ps_addresses_size(), training.model(),
      training.batch_size(), training.epochs(), registered.position());

  PST_ASSIGN_OR_RETURN(const Model* model, ModelFor(training));
  PST_ASSIGN_OR_RETURN(std::vector<ModelVariable> variables, model->Variables(training));
  PST_RETURN_IF_ERROR(CheckPlanMatches(state.plan(), variables));
  const std::vector<std::string> ps_addresses(state.ps_addresses().begin(),
                                              state.ps_addresses().end());
  PST_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps,
                       PsClient::Create(state.plan(), DenseNames(variables),
                                        connections.ps_transport(ps_addresses, options.rpc_timeout),
                                        options.worker_index, options.incarnation));

  // A restarted worker: the ps know exactly where its last push left off.
  int64_t start = registered.position();
  const int64_t on_ps = PositionOnPs(*connections.ps_control(ps_addresses), options.worker_index,
                                     state.generation());
  if (on_ps > start) {
    spdlog::info("the ps took this worker's pushes up to data position {}: going on from there",
                 on_ps);
    start = on_ps;
  }
  Progress progress;
  progress.Begin(state.generation(), start);
  CoordinatorView view;
  view.Update(state.phase(), state.generation(), start, false);

  // Heartbeats: progress out; phase, generation and "should stop" back. A
  // coordinator that no longer knows this worker (a restarted chief) is
  // told where it is. Without an answer for recovery_timeout, give up.
  common::StopSignal lost_coordinator;
  absl::Notification loop_done;
  // This worker finished in its current generation and waits for the end.
  std::atomic<bool> finished{false};
  absl::Status heartbeat_error;
  std::thread heartbeat([&] {
    absl::Time last_ok = absl::Now();
    while (!loop_done.WaitForNotificationWithTimeout(options.heartbeat_interval)) {
      proto::HeartbeatRequest request;
      request.set_worker_index(options.worker_index);
      request.set_incarnation(options.incarnation);
      progress.Report(&request);
      absl::StatusOr<proto::HeartbeatResponse> answer =
          coordinator->Heartbeat(request, options.heartbeat_interval + absl::Seconds(1));
      if (answer.ok()) {
        const proto::HeartbeatResponse& response = *answer;
        last_ok = absl::Now();
        view.Update(response.phase(), response.generation(), response.position(),
                    response.should_stop());
        continue;
      }
      const absl::Status& status = answer.status();
      if (status.code() == absl::StatusCode::kFailedPrecondition) {
        proto::RegisterRequest again;
        again.set_worker_index(options.worker_index);
        again.set_incarnation(options.incarnation);
        again.set_position(request.position());
        again.set_generation(request.generation());
        again.set_finished(finished.load());
        absl::StatusOr<proto::RegisterResponse> r =
            Register(coordinator, options, again, absl::Now(), stop);
        if (r.ok()) {
          spdlog::info("registered again with a restarted coordinator (generation {})",
                       r->state().generation());
          last_ok = absl::Now();
          view.Update(r->state().phase(), r->state().generation(), r->position(), false);
          continue;
        }
      } else if (status.code() == absl::StatusCode::kAborted) {
        heartbeat_error = absl::AlreadyExistsError(
            absl::StrCat("another process registered as worker ", options.worker_index, ": ",
                         status.message()));
        lost_coordinator.Stop("replaced");
        return;
      }
      if (absl::Now() - last_ok > options.recovery_timeout) {
        heartbeat_error = absl::UnavailableError(
            absl::StrCat("lost the coordinator at ", options.coordinator_address, " for ",
                         absl::FormatDuration(options.recovery_timeout),
                         " (--recovery_timeout_s): ", status.message()));
        lost_coordinator.Stop("lost the coordinator");
        return;
      }
    }
  });

  // Everything from here on runs with heartbeats going (loading the data
  // can take a while); the heartbeat thread is joined on every path.
  absl::Status status;
  int64_t global_step = -1;
  bool completed = false;
  // This worker's shard of the data.
  std::unique_ptr<ModelData> data;
  status = [&]() -> absl::Status {
    PST_ASSIGN_OR_RETURN(data, model->Load(training, options.data_dir, /*held_out=*/false,
                                           options.worker_index, state.num_workers()));
    spdlog::info("training on {} example(s) of {}", data->size(),
                 model->reads_data_file() ? training.data() : options.data_dir);
    if (data->size() == 0) {
      return absl::FailedPreconditionError("this worker's shard of the training data is empty");
    }
    return absl::OkStatus();
  }();

  // The logical devices, freed (GPU contexts reset) when this returns.
  std::unique_ptr<DeviceSet> devices;
  const std::string job_prefix = absl::StrCat("/job:worker/replica:0/task:", options.worker_index);
  if (status.ok()) {
    status = [&]() -> absl::Status {
      std::vector<LogicalDeviceSpec> specs = options.device_specs;
      if (specs.empty()) {
        PST_ASSIGN_OR_RETURN(specs, PlanDevices(DeviceOptions(), GpuInventory()));
      }
      PST_ASSIGN_OR_RETURN(devices, DeviceSet::Create(std::move(specs)));
      for (const LogicalDeviceSpec& spec : devices->specs()) {
        spdlog::info("{}", DeviceLogLine(spec, job_prefix));
      }
      return absl::OkStatus();
    }();
  }

  const uint64_t shuffle_seed = training.seed() ^ (uint64_t(options.worker_index) << 32);
  int64_t generation = state.generation();
  ps->set_generation(generation);
  auto recovering = [&](const CoordinatorView::State& v) {
    return v.generation != generation || v.phase == proto::PHASE_RECOVERING;
  };
  LoopControl control;
  control.should_stop = [&] {
    const CoordinatorView::State v = view.Get();
    return stop.stopped() || lost_coordinator.stopped() || v.should_stop || recovering(v);
  };
  control.step_delay = options.step_delay;
  if (devices != nullptr) control.devices = devices->devices();
  control.log_device_placement = options.log_device_placement;
  control.job_prefix = job_prefix;
  StepTimes times;
  control.times = &times;
  // Prometheus (--metrics_port): counters raised on the training thread
  // after every step, from the step times the loop keeps.
  struct StepMetrics {
    prometheus::Counter *steps, *examples, *compute, *communication, *exposed, *sent, *received;
    prometheus::Gauge* loss;
  };
  std::optional<StepMetrics> step_metrics;
  if (common::MetricsExporter* exporter = common::ProcessMetrics(); exporter != nullptr) {
    prometheus::Registry& r = exporter->registry();
    auto counter = [&](const char* name, const char* help) {
      return &prometheus::BuildCounter().Name(name).Help(help).Labels(exporter->labels())
                  .Register(r).Add({});
    };
    step_metrics = StepMetrics{
        counter("pstrain_worker_steps_total", "Training steps"),
        counter("pstrain_worker_examples_total", "Examples trained"),
        counter("pstrain_worker_compute_seconds_total", "Time computing gradients"),
        counter("pstrain_worker_communication_seconds_total", "Time in push+pull calls"),
        counter("pstrain_worker_exposed_communication_seconds_total",
                "Push+pull time not hidden by compute"),
        counter("pstrain_worker_sent_bytes_total", "Bytes of requests sent to the ps"),
        counter("pstrain_worker_received_bytes_total", "Bytes of answers received from the ps"),
        &prometheus::BuildGauge()
             .Name("pstrain_worker_loss")
             .Help("Loss of the last batch")
             .Labels(exporter->labels())
             .Register(r)
             .Add({})};
  }
  control.on_step = [&](int64_t examples, float loss, int epoch, int64_t version,
                        int64_t position) {
    progress.Step(examples, loss, epoch, version, position);
    if (step_metrics.has_value()) {
      step_metrics->steps->Increment();
      step_metrics->examples->Increment(static_cast<double>(examples));
      common::RaiseCounterTo(*step_metrics->compute, absl::ToDoubleSeconds(times.compute));
      common::RaiseCounterTo(*step_metrics->communication,
                             absl::ToDoubleSeconds(times.communication));
      common::RaiseCounterTo(*step_metrics->exposed, absl::ToDoubleSeconds(times.waited));
      const PsTraffic traffic = ProcessPsTraffic();
      common::RaiseCounterTo(*step_metrics->sent, static_cast<double>(traffic.sent_bytes));
      common::RaiseCounterTo(*step_metrics->received, static_cast<double>(traffic.received_bytes));
      step_metrics->loss->Set(loss);
    }
  };

  std::optional<absl::Time> failing_since;  // first failure since the last good step
  absl::Duration backoff = absl::Milliseconds(100);
  while (status.ok()) {
    control.start_position = progress.position();
    const int64_t position_before = progress.position();
    absl::StatusOr<int64_t> trained =
        model->Train(training, *data, shuffle_seed, ps.get(), control);
    if (progress.position() != position_before) {
      failing_since.reset();
      backoff = absl::Milliseconds(100);
    }
    if (stop.stopped() || lost_coordinator.stopped()) {
      status = trained.status();
      break;
    }
    CoordinatorView::State v = view.Get();
    if (trained.ok() && !recovering(v)) {
      global_step = *trained;
      // Finished (or told to stop): report it. The coordinator refuses a
      // finish from an older generation; then the worker goes on.
      proto::WorkerDoneRequest done;
      done.mutable_final_progress()->set_worker_index(options.worker_index);
      done.mutable_final_progress()->set_incarnation(options.incarnation);
      progress.Report(done.mutable_final_progress());
      done.set_completed(true);
      done.set_reason("finished");
      absl::Status reported = coordinator->WorkerDone(done, absl::Seconds(5));
      if (reported.ok()) {
        finished = true;
        // Stay up, heartbeating, until the chief ends the job (PHASE_DONE,
        // which follows every stop it asks for; with --max_steps, should_stop
        // comes first): the chief is then the first task to exit, which
        // `docker-compose up --exit-code-from chief` needs (it stops every
        // container at the first exit). A ps lost before the chief's final
        // save is restored from a checkpoint that lacks this worker's last
        // steps: then it trains again from its position there.
        spdlog::info("waiting for the chief to end the job");
        while (!stop.stopped() && !lost_coordinator.stopped() && v.phase != proto::PHASE_DONE &&
               !recovering(v)) {
          v = view.WaitForUpdate(v.updates, options.heartbeat_interval);
        }
        if (stop.stopped() || lost_coordinator.stopped() || v.phase == proto::PHASE_DONE) {
          completed = true;
          break;
        }
        finished = false;
        spdlog::warn(
            "the ps are being restored from a checkpoint after this worker finished: it trains "
            "again from its position there");
      } else {
        spdlog::warn("could not report completion: {}", reported.message());
      }
      if (!failing_since.has_value()) failing_since = absl::Now();
    } else if (!trained.ok() && !recovering(v) && !Retryable(trained.status())) {
      status = trained.status();
      break;
    } else if (!trained.ok() || recovering(v)) {
      if (!failing_since.has_value()) failing_since = absl::Now();
      if (!trained.ok()) {
        spdlog::warn("step at data position {} failed: {}; waiting for the cluster",
                     progress.position(), trained.status().message());
      }
    }
    // Wait: for a new generation (the ps restored), or a moment before a
    // retry from the same position.
    const absl::Time retry_at = absl::Now() + backoff;
    backoff = std::min(2 * backoff, absl::Seconds(2));
    for (;;) {
      const absl::Time now = absl::Now();
      if (stop.stopped() || lost_coordinator.stopped() || v.should_stop) break;
      if (now - *failing_since > options.recovery_timeout) break;
      if (v.phase != proto::PHASE_RECOVERING && (v.generation != generation || now >= retry_at)) {
        break;
      }
      // While the chief restores the ps, wait a heartbeat at a time.
      v = view.WaitForUpdate(v.updates, v.phase == proto::PHASE_RECOVERING
                                            ? options.heartbeat_interval
                                            : retry_at - now);
    }
    if (stop.stopped() || lost_coordinator.stopped()) break;
    if (v.should_stop) {
      spdlog::info("the coordinator ended the job while this worker waited");
      break;
    }
    if (absl::Now() - *failing_since > options.recovery_timeout) {
      status = absl::UnavailableError(absl::StrCat(
          "the cluster did not recover within --recovery_timeout_s (",
          absl::FormatDuration(options.recovery_timeout), ")",
          trained.ok() ? std::string() : absl::StrCat(": ", trained.status().message())));
      break;
    }
    if (v.generation != generation) {
      generation = v.generation;
      ps->set_generation(generation);
      progress.Begin(generation, v.position);
      spdlog::info("the ps were restored (generation {}): going on from data position {}",
                   generation, v.position);
    } else {
      spdlog::info("retrying from data position {}", progress.position());
    }
  }
  loop_done.Notify();
  heartbeat.join();
  if (status.ok() && !heartbeat_error.ok()) status = heartbeat_error;
  if (stop.stopped()) spdlog::info("stopping early: {}", stop.reason());

  if (!completed) {
    // Leaving early: tell the coordinator (best effort when it is gone).
    proto::WorkerDoneRequest done;
    done.mutable_final_progress()->set_worker_index(options.worker_index);
    done.mutable_final_progress()->set_incarnation(options.incarnation);
    progress.Report(done.mutable_final_progress());
    done.set_completed(false);
    done.set_reason(status.ok() ? stop.reason() : std::string(status.message()));
    coordinator->WorkerDone(done, absl::Seconds(5)).IgnoreError();
  }
  spdlog::info("worker finished: {} step(s), global step {}, data position {}", progress.steps(),
               global_step, progress.position());
  if (times.steps > 0) {
    const double per_step = 1e3 / static_cast<double>(times.steps);
    const double compute = absl::ToDoubleSeconds(times.compute);
    const double communication = absl::ToDoubleSeconds(times.communication);
    spdlog::info(
        "time per step: compute {:.2f} ms, push+pull {:.2f} ms ({:.2f} ms of it not hidden by "
        "compute); compute/communication {:.2f}{}",
        compute * per_step, communication * per_step,
        absl::ToDoubleSeconds(times.waited) * per_step,
        communication > 0 ? compute / communication : 0.0,
        model->Overlaps(training) ? " (overlapped)" : "");
  }
  return status;
}

absl::StatusOr<int> ClaimWorkerIndex(const std::string& coordinator_address,
                                     const std::string& claimant, absl::Duration timeout,
                                     const common::StopSignal& stop) {
  const std::unique_ptr<CoordinatorClient> coordinator =
      MakeGrpcCoordinatorClient(coordinator_address);
  proto::ClaimWorkerIndexRequest request;
  request.set_claimant(claimant);
  proto::ClaimWorkerIndexResponse response;
  PST_RETURN_IF_ERROR(CallCoordinatorUntil(
      [&](absl::Duration call_timeout) -> absl::Status {
        PST_ASSIGN_OR_RETURN(response, coordinator->ClaimWorkerIndex(request, call_timeout));
        return absl::OkStatus();
      },
      coordinator_address, absl::Now() + timeout, stop, "claiming an index",
      " a worker index claim"));
  return response.index();
}

}  // namespace pst::worker
