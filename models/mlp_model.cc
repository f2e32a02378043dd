#include "models/mlp_model.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "models/background.h"
#include "models/device_mlp.h"
#include "models/gradient_clip.h"
#include "models/model_spec.h"

namespace pst::models {
namespace {

// ASYNC and SSP overlap when asked; SYNC cannot: a step's gradient must be
// computed from the version it is tagged with.
bool OverlapsIn(const proto::TrainingConfig& training) {
  return training.overlap() && training.sync().mode() != proto::SYNC;
}

struct MnistData : ModelData {
  data::Dataset data;
  int64_t size() const override { return data.num_examples; }
};

class Mlp784 : public Model {
 public:
  std::string_view name() const override { return "mlp"; }
  std::string_view default_hidden() const override { return "256,128"; }

  absl::StatusOr<std::vector<ModelVariable>> Variables(
      const proto::TrainingConfig& training) const override {
    PST_ASSIGN_OR_RETURN(MlpConfig config, MlpConfigFor(training));
    return DenseVariables(MlpParamSpecs(config), training.seed());
  }

  absl::StatusOr<std::unique_ptr<ModelData>> Load(const proto::TrainingConfig& training,
                                                  const std::string& data_dir, bool held_out,
                                                  int shard, int num_shards) const override {
    PST_ASSIGN_OR_RETURN(
        data::Dataset all,
        data::LoadFashionMnist(data_dir, held_out ? data::Split::kTest : data::Split::kTrain));
    auto loaded = std::make_unique<MnistData>();
    loaded->data = held_out ? std::move(all) : data::ShardDataset(all, shard, num_shards);
    return loaded;
  }

  int64_t CountTrainingExamples(const proto::TrainingConfig& training,
                                const std::string& data_dir) const override {
    absl::StatusOr<int> count = data::CountFashionMnist(data_dir, data::Split::kTrain);
    return count.ok() ? *count : 0;
  }

  absl::StatusOr<int64_t> Train(const proto::TrainingConfig& training, const ModelData& data,
                                uint64_t shuffle_seed, client::PsClient* ps,
                                const LoopControl& control) const override {
    PST_ASSIGN_OR_RETURN(const MnistData* mnist, DataAs<MnistData>(data, name()));
    return TrainMlp(training, mnist->data, shuffle_seed, ps, control);
  }

  bool Overlaps(const proto::TrainingConfig& training) const override {
    return OverlapsIn(training);
  }

  absl::StatusOr<ModelEvaluation> Evaluate(const proto::TrainingConfig& training,
                                           const ModelData& held_out,
                                           client::PsClient* ps) const override {
    PST_ASSIGN_OR_RETURN(const MnistData* test, DataAs<MnistData>(held_out, name()));
    PST_ASSIGN_OR_RETURN(MlpConfig config, MlpConfigFor(training));
    ModelEvaluation result;
    client::Values params;
    PST_ASSIGN_OR_RETURN(result.global_step, ps->Pull(&params));
    Mlp model(config);
    PST_ASSIGN_OR_RETURN(
        Mlp::Eval eval, model.Evaluate(params, test->data.features.data(), test->data.labels.data(),
                                       test->data.num_examples));
    result.metrics = {{"test_accuracy", eval.accuracy}, {"test_loss", eval.loss}};
    result.line = absl::StrFormat("test accuracy %.4f, test loss %.4f", eval.accuracy, eval.loss);
    return result;
  }
};

}  // namespace

const Model& MlpModel() {
  static const Mlp784 model;
  return model;
}

absl::StatusOr<MlpConfig> MlpConfigFor(const proto::TrainingConfig& training) {
  MlpConfig config;
  config.input_dim = kFashionMnistDim;
  config.num_classes = kFashionMnistClasses;
  config.hidden.assign(training.hidden_units().begin(), training.hidden_units().end());
  for (int units : config.hidden) {
    if (units < 1) return absl::InvalidArgumentError("hidden layer widths must be positive");
  }
  return config;
}

absl::StatusOr<int64_t> TrainMlp(const proto::TrainingConfig& training, const data::Dataset& data,
                                 uint64_t shuffle_seed, client::PsClient* ps,
                                 const LoopControl& control) {
  PST_ASSIGN_OR_RETURN(MlpConfig config, MlpConfigFor(training));
  const bool sync = training.sync().mode() == proto::SYNC;
  // On one CPU device the reference Mlp computes straight from the host
  // buffers; the Device path would first copy the parameters and the batch
  // into device buffers, every step (about 15% slower on the CPU). Any
  // other set of devices: MirroredMlp.
  const bool host_only = HostOnly(control.devices);
  std::vector<device::Device*> devices = control.devices;
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
  client::Values params, grads;
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
    device::HostBuffer x[device::Device::kCopySlots], y[device::Device::kCopySlots];
    int epoch = -1;
    int64_t first = -1;  // the batch staged in `slot`, or -1
    int slot = 0;
    absl::Status prefetched;
  } staging;
  std::optional<Background> prefetcher;
  if (!host_only) {
    for (int s = 0; s < device::Device::kCopySlots; ++s) {
      PST_ASSIGN_OR_RETURN(staging.x[s], devices[0]->AllocateHost(x.size() * sizeof(float)));
      PST_ASSIGN_OR_RETURN(staging.y[s], devices[0]->AllocateHost(y.size() * sizeof(int32_t)));
    }
    prefetcher.emplace();
  }
  auto stage = [&](int slot, int64_t first, int64_t n) {
    gather(first, n, staging.x[slot].f32(), staging.y[slot].i32());
    return mirrored->Stage(slot, staging.x[slot].f32(), staging.y[slot].i32(), static_cast<int>(n));
  };
  auto compute_on_devices = [&](int64_t first, int64_t n, int epoch,
                                client::Values* out) -> absl::StatusOr<float> {
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
  auto compute = [&](int64_t first, int64_t n, int epoch,
                     client::Values* out) -> absl::StatusOr<float> {
    const absl::Time start = absl::Now();
    absl::StatusOr<float> loss;
    if (host_only) {
      gather(first, n, x.data(), y.data());
      loss = host_model->LossAndGradients(params, x.data(), y.data(), static_cast<int>(n), out);
    } else {
      loss = compute_on_devices(first, n, epoch, out);
    }
    // The whole gradient before it is pushed (--clip_norm).
    if (loss.ok()) ClipByGlobalNorm(training.clip_norm(), {out});
    if (control.step_delay > absl::ZeroDuration()) absl::SleepFor(control.step_delay);
    times.compute += absl::Now() - start;
    return loss;
  };

  if (OverlapsIn(training)) {
    // Pipelined: batch b's gradients are computed while the push+pull of
    // batch b-1 is in flight, from the values batch b-2's answer brought.
    // The push in flight reads its gradient buffer (zero-copy), so the two
    // buffers alternate; its answer lands in `incoming`.
    client::Values incoming, pipe[2];
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
          // The push in flight counts: its step is sure to come.
          const int64_t steps_to_come = global_step + (flight.has_value() ? 1 : 0);
          if (control.should_stop(position) || ReachedMaxSteps(training, steps_to_come)) {
            return false;
          }
          client::Values* out = &pipe[next];
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
        if (control.should_stop(position) || ReachedMaxSteps(training, global_step)) return false;
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

}  // namespace pst::models
