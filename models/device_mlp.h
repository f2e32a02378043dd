// The MLP of mlp.h computed on a Device (CPU or GPU), and its data-parallel
// form over several logical devices of one worker (MirroredStrategy inside a
// worker).
//
// Same parameter layout (MlpParamSpecs), same contract and, on the CPU, the
// same arithmetic as models::Mlp: parameters and batches live on the host;
// each call uploads them, runs on the device and downloads the results.
//
// MirroredMlp splits a batch into contiguous shards, one per device (the
// first batch % N shards get one example more), computes each shard's
// gradient on its device, concurrently, with every per-example term scaled
// by 1 / (whole batch), and sums the shards' gradients on the host in device
// order. The result is the gradient of the whole batch's mean loss, as one
// device would compute it, up to float rounding. Gradients are summed
// through host memory (no NCCL).
//
// Thread-safety: an instance holds device buffers; use one per thread. Its
// devices must not be used by other threads during a call.
#ifndef PST_MODELS_DEVICE_MLP_H_
#define PST_MODELS_DEVICE_MLP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "models/mlp.h"

namespace pst::models {

class DeviceMlp {
 public:
  // `device` is not owned and must outlive this model. Buffers are made on
  // first use and grow with the batch; all are freed on destruction.
  DeviceMlp(MlpConfig config, device::Device* device);

  const MlpConfig& config() const { return config_; }
  device::Device* device() const { return device_; }

  // As Mlp::LossAndGradients. Errors: those of Mlp, plus ResourceExhausted
  // when the device's memory budget is too small, and Internal for a device
  // failure.
  absl::StatusOr<float> LossAndGradients(const ParamSet& params, const float* x,
                                         const int32_t* labels, int batch, ParamSet* grads);
  // As Mlp::Forward.
  absl::Status Forward(const ParamSet& params, const float* x, int batch,
                       std::vector<float>* logits);
  // As Mlp::Evaluate (chunks of 1000 examples; logits come back to the host
  // for the loss and the arg-max).
  absl::StatusOr<Mlp::Eval> Evaluate(const ParamSet& params, const float* x, const int32_t* labels,
                                     int n);

  // The building block of MirroredMlp: fills `grads` with grad_scale times
  // the gradient of the summed loss of `batch` examples, and returns that
  // summed loss. LossAndGradients is this with grad_scale = 1 / batch.
  // REQUIRES: arguments already validated (params sizes, labels in range).
  absl::StatusOr<double> ScaledLossSumAndGradients(const ParamSet& params, const float* x,
                                                   const int32_t* labels, int batch,
                                                   float grad_scale, ParamSet* grads);

  // Prefetching. Stage queues the copy of a batch (batch >= 0 examples)
  // into staging slot `slot` (0 or 1) with CopyToDeviceAsync, so that it
  // travels while the other slot's batch computes;
  // ScaledLossSumAndGradientsStaged then computes as
  // ScaledLossSumAndGradients on that slot's batch. `x` and `labels` must
  // stay unchanged until that call returns.
  // Stage may run on a second thread during a compute call on the other
  // slot (and only then). Errors: InvalidArgument for a bad slot,
  // FailedPrecondition when the slot holds no examples.
  // REQUIRES: labels already validated.
  absl::Status Stage(int slot, const float* x, const int32_t* labels, int batch);
  absl::StatusOr<double> ScaledLossSumAndGradientsStaged(int slot, const ParamSet& params,
                                                         float grad_scale, ParamSet* grads);

 private:
  absl::Status Upload(const ParamSet& params);
  // Forward pass over `batch` rows of `x` (device memory); leaves the
  // logits in acts_.back().
  absl::Status ForwardOnDevice(const float* x, int batch);
  // The step on a batch already on the device.
  absl::StatusOr<double> ComputeOnDevice(const ParamSet& params, const float* x,
                                         const int32_t* labels, int batch, float grad_scale,
                                         ParamSet* grads);
  // Buffers for `batch` examples: activations, their gradients, the loss,
  // and with `input` x_ and labels_ (the staged path has its own).
  absl::Status Reserve(int batch, bool input = true);

  MlpConfig config_;
  std::vector<ParamSpec> specs_;
  std::vector<int> dims_;  // input, hidden..., classes
  device::Device* device_;
  std::vector<device::DeviceBuffer> params_;  // per spec
  std::vector<device::DeviceBuffer> grads_;   // per spec
  std::vector<device::DeviceBuffer> acts_;    // per layer: post-ReLU, logits last
  std::vector<device::DeviceBuffer> dacts_;   // per layer: gradient of the pre-activation
  device::DeviceBuffer x_;
  device::DeviceBuffer labels_;
  device::DeviceBuffer row_loss_;
  std::vector<float> host_row_loss_;
  device::DeviceBuffer staged_x_[device::Device::kCopySlots];
  device::DeviceBuffer staged_labels_[device::Device::kCopySlots];
  int staged_batch_[device::Device::kCopySlots] = {};
};

// For --log_device_placement: for each of `devices`, replica_ops(op) names
// one replica's variable copies and ops, op(name, type) adding TensorFlow's
// line "name: (Type): <job_prefix>/device:<device>"; the last line is the
// cross-device gradient sum, through host memory.
using PlacementOp = std::function<void(const std::string& name, const char* type)>;
std::vector<std::string> DevicePlacementLines(
    absl::string_view job_prefix, const std::vector<const device::Device*>& devices,
    const std::function<void(const PlacementOp&)>& replica_ops);

class MirroredMlp {
 public:
  // One replica per device; devices are not owned and must outlive this.
  // REQUIRES: !devices.empty().
  MirroredMlp(MlpConfig config, std::vector<device::Device*> devices);

  const MlpConfig& config() const { return config_; }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }

  // As Mlp::LossAndGradients, for the whole batch, whatever the number of
  // devices. Shards of a batch smaller than the device count may be empty;
  // those devices sit the step out.
  absl::StatusOr<float> LossAndGradients(const ParamSet& params, const float* x,
                                         const int32_t* labels, int batch, ParamSet* grads);
  // Prefetching, over every replica: Stage validates a batch, splits it into
  // the shards LossAndGradients would and stages each on its device
  // (DeviceMlp::Stage); LossAndGradientsStaged computes that slot's batch
  // as LossAndGradients would. Same threading rules as DeviceMlp's.
  absl::Status Stage(int slot, const float* x, const int32_t* labels, int batch);
  absl::StatusOr<float> LossAndGradientsStaged(int slot, const ParamSet& params, ParamSet* grads);

  // On the first device.
  absl::StatusOr<Mlp::Eval> Evaluate(const ParamSet& params, const float* x, const int32_t* labels,
                                     int n);

  // The shard sizes a batch is split into.
  static std::vector<int> ShardSizes(int batch, int num_devices);

  // For --log_device_placement: one line per variable copy and per op of a
  // step, in TensorFlow's form "dense_0/MatMul: (MatMul):
  // /job:worker/replica:0/task:0/device:GPU:0" (`job_prefix` is the part
  // before "/device:"), then the cross-device gradient sum, on the host.
  std::vector<std::string> DevicePlacement(absl::string_view job_prefix) const;

 private:
  static std::vector<int> ShardStarts(const std::vector<int>& sizes);
  // Runs replica_step(i) for every replica with a non-empty shard, each on a
  // thread of its own; sums their losses and replica_grads_ into `grads`.
  absl::StatusOr<float> SumOverReplicas(
      const std::vector<int>& sizes, int batch, ParamSet* grads,
      const std::function<absl::StatusOr<double>(int)>& replica_step);

  MlpConfig config_;
  std::vector<ParamSpec> specs_;
  std::vector<std::unique_ptr<DeviceMlp>> replicas_;
  std::vector<ParamSet> replica_grads_;
  int staged_batch_[device::Device::kCopySlots] = {};
};

}  // namespace pst::models

#endif  // PST_MODELS_DEVICE_MLP_H_
