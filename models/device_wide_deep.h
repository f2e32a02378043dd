// The wide & deep model of wide_deep.h computed on a Device (CPU or GPU),
// and its data-parallel form over several logical devices of one worker.
//
// Same parameters, batch layout and contract as models::WideDeep: the
// batch's unique embedding rows come from the ps and are uploaded with the
// batch; the model returns the dense gradients and the gradients of exactly
// those rows. On the device:
//   - the deep rows are gathered into the input with GatherRows (one row per
//     field of each example);
//   - the first layer multiplies the embedding part and the dense features
//     by their own blocks of the kernel (its first F*D rows, then the rest),
//     so the input is never concatenated;
//   - the wide rows are gathered per example and summed by a GEMM with ones;
//   - row gradients are summed with ScatterAddRows.
// Results match WideDeep within float rounding (the sums run in another
// order).
//
// MirroredWideDeep splits a batch into contiguous shards, one per device
// (as MirroredMlp), gives every device all of the batch's unique rows, and
// sums the dense and row gradients of the shards on the host in device
// order.
//
// Thread-safety: an instance holds device buffers; use one per thread.
#ifndef PST_MODELS_DEVICE_WIDE_DEEP_H_
#define PST_MODELS_DEVICE_WIDE_DEEP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "models/wide_deep.h"

namespace pst::models {

class DeviceWideDeep {
 public:
  // `device` is not owned and must outlive this model.
  DeviceWideDeep(WideDeepConfig config, device::Device* device);

  device::Device* device() const { return device_; }

  // As WideDeep::LossAndGradients. Errors: those of WideDeep, plus
  // ResourceExhausted when the device's budget is too small and Internal
  // for a device failure.
  absl::StatusOr<float> LossAndGradients(const ParamSet& dense, const CtrBatch& batch,
                                         ParamSet* dense_grads, std::vector<float>* deep_row_grads,
                                         std::vector<float>* wide_row_grads);
  // As WideDeep::Predict.
  absl::Status Predict(const ParamSet& dense, const CtrBatch& batch, std::vector<float>* probs);

  // The building block of MirroredWideDeep: grad_scale times the gradients
  // of the summed loss of the batch; returns that sum. Row gradients cover
  // all batch.num_unique rows (zero for rows this batch does not use).
  // REQUIRES: inputs already validated (CheckWideDeepInputs).
  absl::StatusOr<double> ScaledLossSumAndGradients(const ParamSet& dense, const CtrBatch& batch,
                                                   float grad_scale, ParamSet* dense_grads,
                                                   std::vector<float>* deep_row_grads,
                                                   std::vector<float>* wide_row_grads);

 private:
  absl::Status Upload(const ParamSet& dense, const CtrBatch& batch, bool labels);
  // Leaves the logits in acts_.back().
  absl::Status Forward(int size);

  WideDeepConfig config_;
  std::vector<int> dims_;  // deep layer widths, 1 last
  device::Device* device_;
  std::vector<device::DeviceBuffer> params_, grads_;
  std::vector<device::DeviceBuffer> acts_, dacts_;  // per deep layer
  device::DeviceBuffer emb_, demb_;         // [size, F*D]: gathered deep rows, their gradient
  device::DeviceBuffer dense_x_;            // [size, num_dense]
  device::DeviceBuffer slot_;               // [size, F]
  device::DeviceBuffer labels_, row_loss_;  // [size]
  device::DeviceBuffer wide_;               // [size, F]: gathered wide values, then gradients
  device::DeviceBuffer ones_;               // [max(F, 1)]
  device::DeviceBuffer deep_rows_, deep_row_grads_;  // [U, D]
  device::DeviceBuffer wide_rows_, wide_row_grads_;  // [U]
  std::vector<float> host_row_loss_;
  device::HostBuffer download_;  // page-locked: the gradients' way back
};

class MirroredWideDeep {
 public:
  // One replica per device; devices are not owned and must outlive this.
  // REQUIRES: !devices.empty().
  MirroredWideDeep(WideDeepConfig config, std::vector<device::Device*> devices);

  int num_replicas() const { return static_cast<int>(replicas_.size()); }

  // As WideDeep::LossAndGradients, for the whole batch.
  absl::StatusOr<float> LossAndGradients(const ParamSet& dense, const CtrBatch& batch,
                                         ParamSet* dense_grads, std::vector<float>* deep_row_grads,
                                         std::vector<float>* wide_row_grads);
  // On the first device.
  absl::Status Predict(const ParamSet& dense, const CtrBatch& batch, std::vector<float>* probs);

  // For --log_device_placement, as MirroredMlp::DevicePlacement.
  std::vector<std::string> DevicePlacement(absl::string_view job_prefix) const;

 private:
  struct ReplicaGrads {
    ParamSet dense;
    std::vector<float> deep_rows, wide_rows;
  };
  WideDeepConfig config_;
  std::vector<std::unique_ptr<DeviceWideDeep>> replicas_;
  std::vector<ReplicaGrads> replica_grads_;
};

}  // namespace pst::models

#endif  // PST_MODELS_DEVICE_WIDE_DEEP_H_
