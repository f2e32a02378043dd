#include "worker/training_loops.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "device/cpu_device.h"
#include "models/ctr_batch.h"
#include "models/device_mlp.h"
#include "models/device_wide_deep.h"
#include "models/mlp.h"
#include "models/model_spec.h"
#include "models/wide_deep.h"
#include "worker/background.h"

namespace pst::worker {
namespace {

bool ReachedMaxSteps(const proto::TrainingConfig& training, int64_t global_step) {
  return training.max_steps() > 0 && global_step >= training.max_steps();
}

// Calls step(first, count, epoch, position) for every batch of a shuffled
// pass, for each epoch, from data position `start_position` on, until step
// fails or asks to stop. `position` counts batches from the job's start.
template <typename Step>
absl::Status ForEachBatch(const proto::TrainingConfig& training, int64_t num_examples,
                          uint64_t shuffle_seed, int64_t start_position,
                          std::vector<int64_t>* order, Step&& step) {
  const int64_t batch = training.batch_size();
  const int64_t per_epoch = (num_examples + batch - 1) / batch;
  if (per_epoch == 0) return absl::OkStatus();
  int64_t position = std::max<int64_t>(0, start_position);
  for (int epoch = static_cast<int>(position / per_epoch); epoch < training.epochs(); ++epoch) {
    // Each epoch's order depends only on the seed and the epoch.
    order->resize(num_examples);
    std::iota(order->begin(), order->end(), 0);
    std::mt19937_64 rng(shuffle_seed ^ (static_cast<uint64_t>(epoch) * 0x9e3779b97f4a7c15ULL));
    std::shuffle(order->begin(), order->end(), rng);
    for (int64_t b = position - epoch * per_epoch; b < per_epoch; ++b, ++position) {
      const int64_t start = b * batch;
      absl::StatusOr<bool> go_on =
          step(start, std::min(batch, num_examples - start), epoch, position);
      if (!go_on.ok()) return go_on.status();
      if (!*go_on) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// Whether a model runs as the reference implementation, straight from host
// memory: on one CPU device (or none given).
bool HostOnly(const std::vector<Device*>& devices) {
  return devices.empty() || (devices.size() == 1 && devices[0]->type() == DeviceType::kCpu);
}

// "CPU:0", for the placement log of a worker given no devices. Only its
// allocator is used, which is thread-safe.
Device* DefaultCpuDevice() {
  static Device* const device = NewCpuDevice(0).release();
  return device;
}

}  // namespace

absl::StatusOr<int64_t> TrainMlp(const proto::TrainingConfig& training, const Dataset& data,
                                 uint64_t shuffle_seed, PsClient* ps, const LoopControl& control) {
  PST_ASSIGN_OR_RETURN(MlpConfig config, MlpConfigFor(training));
  const bool sync = training.sync().mode() == proto::SYNC;
  // On one CPU device the reference Mlp computes straight from the host
  // buffers; the Device path would first copy the parameters and the batch
  // into device buffers, every step (about 15% slower on the CPU). Any
  // other set of devices: MirroredMlp.
  const bool host_only = HostOnly(control.devices);
  std::vector<Device*> devices = control.devices;
  if (devices.empty()) devices.push_back(DefaultCpuDevice());
  std::optional<Mlp> host_model;
  std::optional<MirroredMlp> mirrored;
  if (host_only) host_model.emplace(config);
  if (!host_only || control.log_device_placement) mirrored.emplace(config, devices);
  if (control.log_device_placement) {
    for (const std::string& line : mirrored->DevicePlacement(control.job_prefix)) {
      spdlog::info("{}", line);
    }
  }
  Values params, grads;
  PST_ASSIGN_OR_RETURN(int64_t global_step, ps->Pull(&params));
  const int dim = data.dim;
  const int64_t max_batch = training.batch_size();
  std::vector<float> x(static_cast<size_t>(max_batch) * dim);
  std::vector<int32_t> y(max_batch);
  std::vector<int64_t> order;
  StepTimes unused_times;
  StepTimes& times = control.times != nullptr ? *control.times : unused_times;
  auto gather = [&](int64_t first, int64_t n, float* x_out, int32_t* y_out) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t e = order[first + k];
      std::copy_n(&data.features[e * dim], dim, &x_out[k * dim]);
      y_out[k] = data.labels[e];
    }
  };

  // On devices, each step prefetches: while batch b computes, a second
  // thread gathers batch b+1 of the same epoch into page-locked host memory
  // and queues its copy to the devices (MirroredMlp::Stage), alternating
  // between two staging slots. An epoch's first batch is staged in line.
  struct Staging {
    HostBuffer x[Device::kCopySlots], y[Device::kCopySlots];
    int epoch = -1;
    int64_t first = -1;  // the batch staged in `slot`, or -1
    int slot = 0;
    absl::Status prefetched;
  } staging;
  std::optional<Background> prefetcher;
  if (!host_only) {
    for (int s = 0; s < Device::kCopySlots; ++s) {
      PST_ASSIGN_OR_RETURN(staging.x[s], devices[0]->AllocateHost(x.size() * sizeof(float)));
      PST_ASSIGN_OR_RETURN(staging.y[s], devices[0]->AllocateHost(y.size() * sizeof(int32_t)));
    }
    prefetcher.emplace();
  }
  auto stage = [&](int slot, int64_t first, int64_t n) {
    gather(first, n, staging.x[slot].f32(), staging.y[slot].i32());
    return mirrored->Stage(slot, staging.x[slot].f32(), staging.y[slot].i32(),
                           static_cast<int>(n));
  };
  auto compute_on_devices = [&](int64_t first, int64_t n, int epoch,
                                Values* out) -> absl::StatusOr<float> {
    if (staging.epoch != epoch || staging.first != first) {
      PST_RETURN_IF_ERROR(stage(staging.slot, first, n));
    }
    const int slot = staging.slot;
    const int64_t next = first + n;
    staging.first = -1;
    if (next < data.num_examples) {
      staging.epoch = epoch;
      staging.first = next;
      staging.slot = slot ^ 1;
      const int64_t next_n = std::min(max_batch, data.num_examples - next);
      prefetcher->Start([&, next, next_n] { staging.prefetched = stage(slot ^ 1, next, next_n); });
    }
    absl::StatusOr<float> loss = mirrored->LossAndGradientsStaged(slot, params, out);
    if (staging.first >= 0) {
      prefetcher->Wait();
      if (!staging.prefetched.ok()) {
        staging.first = -1;
        if (loss.ok()) return staging.prefetched;
      }
    }
    return loss;
  };
  // Compute one batch's gradients from `params` into `out`.
  auto compute = [&](int64_t first, int64_t n, int epoch, Values* out) -> absl::StatusOr<float> {
    const absl::Time start = absl::Now();
    absl::StatusOr<float> loss;
    if (host_only) {
      gather(first, n, x.data(), y.data());
      loss = host_model->LossAndGradients(params, x.data(), y.data(), static_cast<int>(n), out);
    } else {
      loss = compute_on_devices(first, n, epoch, out);
    }
    if (control.step_delay > absl::ZeroDuration()) absl::SleepFor(control.step_delay);
    times.compute += absl::Now() - start;
    return loss;
  };

  if (training.sync().mode() == proto::ASYNC && training.overlap()) {
    // Pipelined: batch b's gradients are computed while the push+pull of
    // batch b-1 is in flight, from the values batch b-2's answer brought.
    // The push in flight reads its gradient buffer (zero-copy), so the two
    // buffers alternate; its answer lands in `incoming`.
    Values incoming, pipe[2];
    int next = 0;
    struct InFlight {
      int64_t examples = 0, position = 0;
      float loss = 0;
      int epoch = 0;
      absl::StatusOr<int64_t> version;
      absl::Duration took;
    };
    std::optional<InFlight> flight;
    Background comm;
    // Waits for the push+pull in flight and takes its answer.
    auto land = [&]() -> absl::Status {
      const absl::Time start = absl::Now();
      comm.Wait();
      times.waited += absl::Now() - start;
      times.communication += flight->took;
      ++times.steps;
      InFlight done = *std::move(flight);
      flight.reset();
      PST_RETURN_IF_ERROR(done.version.status());
      global_step = *done.version;
      params.swap(incoming);
      control.on_step(done.examples, done.loss, done.epoch, global_step, done.position + 1);
      return absl::OkStatus();
    };
    absl::Status looped = ForEachBatch(
        training, data.num_examples, shuffle_seed, control.start_position, &order,
        [&](int64_t first, int64_t n, int epoch, int64_t position) -> absl::StatusOr<bool> {
          if (control.should_stop() || ReachedMaxSteps(training, global_step)) return false;
          Values* out = &pipe[next];
          PST_ASSIGN_OR_RETURN(const float loss, compute(first, n, epoch, out));
          if (flight.has_value()) PST_RETURN_IF_ERROR(land());
          flight.emplace();
          flight->examples = n;
          flight->position = position;
          flight->loss = loss;
          flight->epoch = epoch;
          const int64_t base = global_step;
          comm.Start([&, out, position, base] {
            const absl::Time start = absl::Now();
            flight->version = ps->PushPull(position, base, *out, &incoming, position);
            flight->took = absl::Now() - start;
          });
          next ^= 1;
          return true;
        });
    if (flight.has_value()) {
      const absl::Status landed = land();
      if (looped.ok()) looped = landed;
    }
    PST_RETURN_IF_ERROR(looped);
    return global_step;
  }

  PST_RETURN_IF_ERROR(ForEachBatch(
      training, data.num_examples, shuffle_seed, control.start_position, &order,
      [&](int64_t first, int64_t n, int epoch, int64_t position) -> absl::StatusOr<bool> {
        if (control.should_stop() || ReachedMaxSteps(training, global_step)) return false;
        PST_ASSIGN_OR_RETURN(const float loss, compute(first, n, epoch, &grads));
        // SYNC tags a push with the version it was computed from; the other
        // modes with the data position.
        const int64_t tag = sync ? global_step : position;
        const absl::Time start = absl::Now();
        PST_ASSIGN_OR_RETURN(global_step, ps->PushPull(tag, global_step, grads, &params, position));
        const absl::Duration took = absl::Now() - start;
        times.communication += took;
        times.waited += took;
        ++times.steps;
        control.on_step(n, loss, epoch, global_step, position + 1);
        return true;
      }));
  return global_step;
}

absl::StatusOr<int64_t> TrainWideDeep(const proto::TrainingConfig& training, const CtrDataset& data,
                                      uint64_t shuffle_seed, PsClient* ps,
                                      const LoopControl& control) {
  PST_ASSIGN_OR_RETURN(WideDeepConfig config, WideDeepConfigFor(training));
  // As TrainMlp: the reference model on one CPU device, MirroredWideDeep
  // on any other set of devices.
  const bool host_only = HostOnly(control.devices);
  std::optional<WideDeep> host_model;
  std::optional<MirroredWideDeep> mirrored;
  if (host_only) host_model.emplace(config);
  if (!host_only || control.log_device_placement) {
    std::vector<Device*> devices = control.devices;
    if (devices.empty()) devices.push_back(DefaultCpuDevice());
    mirrored.emplace(config, devices);
  }
  if (control.log_device_placement) {
    for (const std::string& line : mirrored->DevicePlacement(control.job_prefix)) {
      spdlog::info("{}", line);
    }
  }
  Values params, grads, row_grads(2);
  PST_ASSIGN_OR_RETURN(int64_t global_step, ps->Pull(&params));
  CtrBatchData batch;
  std::vector<int64_t> order;
  PST_RETURN_IF_ERROR(ForEachBatch(
      training, data.size, shuffle_seed, control.start_position, &order,
      [&](int64_t first, int64_t n, int epoch, int64_t position) -> absl::StatusOr<bool> {
        if (control.should_stop() || ReachedMaxSteps(training, global_step)) return false;
        batch.Gather(data, &order[first], n);
        const std::vector<PsClient::TableIds> tables = batch.Tables();
        PST_RETURN_IF_ERROR(ps->PullRows(tables, &batch.rows));
        PST_ASSIGN_OR_RETURN(
            const float loss,
            host_only ? host_model->LossAndGradients(params, batch.View(n), &grads, &row_grads[0],
                                                     &row_grads[1])
                      : mirrored->LossAndGradients(params, batch.View(n), &grads, &row_grads[0],
                                                   &row_grads[1]));
        if (control.step_delay > absl::ZeroDuration()) absl::SleepFor(control.step_delay);
        PST_RETURN_IF_ERROR(ps->PushRows(position, tables, row_grads));
        PST_ASSIGN_OR_RETURN(global_step,
                             ps->PushPull(position, global_step, grads, &params, position));
        control.on_step(n, loss, epoch, global_step, position + 1);
        return true;
      }));
  return global_step;
}

}  // namespace pst::worker
