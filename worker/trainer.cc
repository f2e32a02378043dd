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
#include "client/grpc_ps_transport.h"
#include "client/ps_client.h"
#include "common/metrics.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/ps_control.h"
#include "common/status_macros.h"
#include "models/train_loop.h"
#include "worker/cluster_link.h"
#include "worker/device_metrics.h"

namespace pst::worker {

absl::Status RunWorker(const TrainerOptions& options, const common::StopSignal& stop) {
  const std::unique_ptr<client::CoordinatorClient> coordinator =
      client::MakeGrpcCoordinatorClient(options.coordinator_address, options.rpc);
  return RunWorker(options, GrpcConnections(coordinator.get(), options.rpc), stop);
}

absl::Status RunWorker(const TrainerOptions& options, const WorkerConnections& connections,
                       const common::StopSignal& stop) {
  PST_ASSIGN_OR_RETURN(std::unique_ptr<ClusterLink> link,
                       ClusterLink::Register(options, connections, stop));
  const proto::ClusterState& state = link->state();
  const proto::TrainingConfig& training = state.training();
  spdlog::info(
      "registered with the coordinator at {}: {} worker(s), {} ps, model {}, batch {}, "
      "{} epoch(s), starting at data position {}",
      options.coordinator_address, state.num_workers(), state.ps_addresses_size(), training.model(),
      training.batch_size(), training.epochs(), link->start_position());

  PST_ASSIGN_OR_RETURN(const models::Model* model, models::ModelFor(training));
  PST_ASSIGN_OR_RETURN(std::vector<models::ModelVariable> variables, model->Variables(training));
  PST_RETURN_IF_ERROR(models::CheckPlanMatches(state.plan(), variables));
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<client::PsClient> ps,
      client::PsClient::Create(
          state.plan(), models::DenseNames(variables),
          client::MakeRoutedTransport(
              connections.ps_transport(link->ps_addresses(), options.rpc_timeout), link->routes()),
          options.worker_index, options.incarnation));
  ps->set_sync(training.sync().mode() == proto::SYNC);
  ps->set_wire_dtype(training.wire_dtype());
  ps->set_topk_ratio(training.topk_ratio());
  Progress& progress = link->progress();
  CoordinatorView& view = link->view();
  const common::StopSignal& lost_coordinator = link->lost();
  link->Start();

  // Everything from here on runs with heartbeats going (loading the data
  // can take a while); the heartbeat thread is joined on every path.
  absl::Status status;
  int64_t global_step = -1;
  bool completed = false;
  // This worker's shard of the data.
  std::unique_ptr<models::ModelData> data;
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
  std::unique_ptr<device::DeviceSet> devices;
  const std::string job_prefix = absl::StrCat("/job:worker/replica:0/task:", options.worker_index);
  if (status.ok()) {
    status = [&]() -> absl::Status {
      std::vector<device::LogicalDeviceSpec> specs = options.device_specs;
      if (specs.empty()) {
        PST_ASSIGN_OR_RETURN(specs,
                             device::PlanDevices(device::DeviceOptions(), device::GpuInventory()));
      }
      PST_ASSIGN_OR_RETURN(devices, device::DeviceSet::Create(std::move(specs)));
      for (const device::LogicalDeviceSpec& spec : devices->specs()) {
        spdlog::info("{}", device::DeviceLogLine(spec, job_prefix));
      }
      return absl::OkStatus();
    }();
  }

  const uint64_t shuffle_seed = models::WorkerShuffleSeed(training, options.worker_index);
  int64_t generation = state.generation();
  ps->set_generation(generation);
  auto recovering = [&](const CoordinatorView::State& v) {
    return v.generation != generation || v.phase == proto::PHASE_RECOVERING;
  };
  // This worker's batches in an epoch: at the end of the epochs the chief
  // acts on it holds (ClusterLink::EpochEndToHold).
  const int64_t per_epoch =
      data == nullptr ? 0 : (data->size() + training.batch_size() - 1) / training.batch_size();
  models::LoopControl control;
  control.should_stop = [&](int64_t position) {
    const CoordinatorView::State v = view.Get();
    return stop.stopped() || lost_coordinator.stopped() || v.should_stop || recovering(v) ||
           link->EpochEndToHold(position, per_epoch) > 0;
  };
  control.step_delay = options.step_delay;
  if (devices != nullptr) control.devices = devices->devices();
  // The devices' figures in /metrics, read at each scrape (gone before the
  // devices are).
  std::unique_ptr<DeviceMetrics> device_metrics;
  if (options.metrics != nullptr && devices != nullptr) {
    std::vector<int> gpus;
    for (const device::LogicalDeviceSpec& spec : devices->specs()) {
      if (spec.type == device::DeviceType::kGpu &&
          std::find(gpus.begin(), gpus.end(), spec.gpu.index) == gpus.end()) {
        gpus.push_back(spec.gpu.index);
      }
    }
    device_metrics =
        std::make_unique<DeviceMetrics>(options.metrics, devices->devices(), std::move(gpus));
  }
  control.log_device_placement = options.log_device_placement;
  control.job_prefix = job_prefix;
  models::StepTimes times;
  control.times = &times;
  // Prometheus (--metrics_port): counters raised on the training thread
  // after every step, from the step times the loop keeps.
  struct StepMetrics {
    prometheus::Counter *steps, *examples, *compute, *communication, *exposed, *sent, *received;
    prometheus::Gauge* loss;
  };
  std::optional<StepMetrics> step_metrics;
  if (common::MetricsExporter* exporter = options.metrics; exporter != nullptr) {
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
      const client::PsTraffic traffic = client::ProcessPsTraffic();
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
    // At the end of an epoch the chief acts on: hold until it is done, then
    // go on from there.
    if (trained.ok() && !recovering(v) && !v.should_stop) {
      if (const int epoch = link->EpochEndToHold(progress.position(), per_epoch); epoch > 0) {
        v = link->AwaitEpochRelease(epoch, v, generation);
        if (stop.stopped() || lost_coordinator.stopped()) break;
        if (!recovering(v)) continue;
      }
    }
    if (trained.ok() && !recovering(v)) {
      global_step = *trained;
      // Finished (or told to stop): report it, with where the steps
      // went. The coordinator refuses a finish from an older generation;
      // then the worker goes on.
      const proto::StepTimes step_times = StepTimesProto(times, ps->dense_wire_bytes());
      absl::Status reported = link->ReportDone(true, "finished", &step_times);
      if (reported.ok()) {
        link->set_finished(true);
        // Stay up, heartbeating, until the chief ends the job (PHASE_DONE,
        // which follows every stop it asks for; with --max_steps, should_stop
        // comes first): the chief is then the first task to exit, which
        // `docker-compose up --exit-code-from chief` needs (it stops every
        // container at the first exit). A ps lost before the chief's final
        // save is restored from a checkpoint that lacks this worker's last
        // steps: then it trains again from its position there.
        spdlog::info("waiting for the chief to end the job");
        v = link->AwaitEnd(v, generation);
        if (stop.stopped() || lost_coordinator.stopped() || v.phase == proto::PHASE_DONE) {
          completed = true;
          break;
        }
        link->set_finished(false);
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
    v = link->AwaitCluster(v, generation, *failing_since, absl::Now() + backoff);
    backoff = std::min(2 * backoff, absl::Seconds(2));
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
  link->StopHeartbeats();
  if (status.ok() && !link->heartbeat_error().ok()) status = link->heartbeat_error();
  if (stop.stopped()) spdlog::info("stopping early: {}", stop.reason());

  if (!completed) {
    // Leaving early: tell the coordinator (best effort when it is gone).
    link->ReportDone(false, status.ok() ? stop.reason() : std::string(status.message()))
        .IgnoreError();
  }
  spdlog::info(
      "worker finished: {} step(s), global step {}, data position {}; peak resident memory "
      "{:.1f} MB",
      progress.steps(), global_step, progress.position(),
      static_cast<double>(common::PeakResidentBytes()) / 1e6);
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
  if (progress.steps() > 0) {
    const client::PsClient::WireBytes wire = ps->dense_wire_bytes();
    const double per_step = 1e3 * static_cast<double>(progress.steps());
    spdlog::info("dense payload per step: {:.1f} kB pushed, {:.1f} kB pulled, in {}{}",
                 static_cast<double>(wire.pushed) / per_step,
                 static_cast<double>(wire.pulled) / per_step,
                 ps->wire_dtype() == proto::DT_BFLOAT16 ? "bf16" : "float32",
                 ps->topk_ratio() > 0 ? absl::StrCat("; gradients as their top ",
                                                     ps->topk_ratio() * 100, "% (error feedback)")
                                      : "");
  }
  return status;
}

absl::StatusOr<int> ClaimWorkerIndex(const std::string& coordinator_address,
                                     const rpc::RpcSettings& settings,
                                     const std::string& claimant, absl::Duration timeout,
                                     const common::StopSignal& stop) {
  const std::unique_ptr<client::CoordinatorClient> coordinator =
      client::MakeGrpcCoordinatorClient(coordinator_address, settings);
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
