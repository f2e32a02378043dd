#include "models/device_mlp.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::models {
namespace {

// As Mlp: Evaluate works through its examples this many at a time.
constexpr int kEvalChunk = 1000;

std::vector<int> LayerDims(const MlpConfig& config) {
  std::vector<int> dims;
  dims.push_back(config.input_dim);
  dims.insert(dims.end(), config.hidden.begin(), config.hidden.end());
  dims.push_back(config.num_classes);
  return dims;
}

absl::Status CheckArgs(const MlpConfig& config, const std::vector<ParamSpec>& specs,
                       const ParamSet& params, const float* x, const int32_t* labels, int batch,
                       bool check_params = true) {
  for (int d : LayerDims(config)) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("MlpConfig has a non-positive layer width (", d, ")"));
    }
  }
  if (check_params) PST_RETURN_IF_ERROR(CheckParamSizes(specs, params));
  if (batch <= 0) return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  if (x == nullptr) return absl::InvalidArgumentError("x is null");
  if (labels == nullptr) return absl::InvalidArgumentError("labels is null");
  for (int i = 0; i < batch; ++i) {
    if (labels[i] < 0 || labels[i] >= config.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("label of example ", i, " is ", labels[i],
                                                     ", outside [0, ", config.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

size_t Floats(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

// Cross-entropy of one row of logits, as Mlp computes it.
double RowCrossEntropy(const float* z, int num_classes, int label) {
  const float max = *std::max_element(z, z + num_classes);
  double sum = 0;
  for (int j = 0; j < num_classes; ++j) sum += std::exp(z[j] - max);
  return std::log(sum) + static_cast<double>(max) - static_cast<double>(z[label]);
}

}  // namespace

DeviceMlp::DeviceMlp(MlpConfig config, device::Device* device)
    : config_(std::move(config)),
      specs_(MlpParamSpecs(config_)),
      dims_(LayerDims(config_)),
      device_(device) {
  params_.resize(specs_.size());
  grads_.resize(specs_.size());
  acts_.resize(dims_.size() - 1);
  dacts_.resize(dims_.size() - 1);
}

absl::Status DeviceMlp::Upload(const ParamSet& params) {
  // One copy per parameter, straight from the caller's vectors: packing
  // them into one staging buffer first measured slower on an H100 (the
  // extra host copies cost more than the saved calls).
  for (size_t i = 0; i < params.size(); ++i) {
    const size_t bytes = Floats(static_cast<int64_t>(params[i].size()));
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&params_[i], bytes));
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&grads_[i], bytes));
    PST_RETURN_IF_ERROR(device_->CopyToDevice(params_[i].data(), params[i].data(), bytes));
  }
  return absl::OkStatus();
}

absl::Status DeviceMlp::Reserve(int batch, bool input) {
  if (input) {
    PST_RETURN_IF_ERROR(
        device_->EnsureCapacity(&x_, Floats(static_cast<int64_t>(batch) * config_.input_dim)));
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&labels_, sizeof(int32_t) * batch));
  }
  PST_RETURN_IF_ERROR(device_->EnsureCapacity(&row_loss_, Floats(batch)));
  for (size_t l = 0; l + 1 < dims_.size(); ++l) {
    const size_t bytes = Floats(static_cast<int64_t>(batch) * dims_[l + 1]);
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&acts_[l], bytes));
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&dacts_[l], bytes));
  }
  return absl::OkStatus();
}

absl::Status DeviceMlp::ForwardOnDevice(const float* x, int batch) {
  const size_t num_layers = dims_.size() - 1;
  const float* in = x;
  for (size_t l = 0; l < num_layers; ++l) {
    const int in_dim = dims_[l];
    const int out_dim = dims_[l + 1];
    float* out = acts_[l].f32();
    const int64_t n = static_cast<int64_t>(batch) * out_dim;
    // As Mlp: start each row from the bias, then accumulate X * W on top.
    PST_RETURN_IF_ERROR(device_->Fill(n, 0.0f, out));
    PST_RETURN_IF_ERROR(device_->BiasAdd(batch, out_dim, params_[2 * l + 1].f32(), out));
    PST_RETURN_IF_ERROR(device_->Gemm(false, false, batch, out_dim, in_dim, 1.0f, in, in_dim,
                                      params_[2 * l].f32(), out_dim, 1.0f, out, out_dim));
    if (l + 1 < num_layers) PST_RETURN_IF_ERROR(device_->Relu(n, out));
    in = out;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceMlp::ScaledLossSumAndGradients(const ParamSet& params, const float* x,
                                                            const int32_t* labels, int batch,
                                                            float grad_scale, ParamSet* grads) {
  PST_RETURN_IF_ERROR(Reserve(batch));
  PST_RETURN_IF_ERROR(
      device_->CopyToDevice(x_.data(), x, Floats(static_cast<int64_t>(batch) * config_.input_dim)));
  PST_RETURN_IF_ERROR(device_->CopyToDevice(labels_.data(), labels, sizeof(int32_t) * batch));
  return ComputeOnDevice(params, x_.f32(), labels_.i32(), batch, grad_scale, grads);
}

absl::Status DeviceMlp::Stage(int slot, const float* x, const int32_t* labels, int batch) {
  if (slot < 0 || slot >= device::Device::kCopySlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("staging slot ", slot, " outside [0, ", device::Device::kCopySlots, ")"));
  }
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat("batch must be >= 0, got ", batch));
  staged_batch_[slot] = 0;
  if (batch > 0) {
    const size_t x_bytes = Floats(static_cast<int64_t>(batch) * config_.input_dim);
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&staged_x_[slot], x_bytes));
    PST_RETURN_IF_ERROR(device_->EnsureCapacity(&staged_labels_[slot], sizeof(int32_t) * batch));
    PST_RETURN_IF_ERROR(device_->CopyToDeviceAsync(staged_x_[slot].data(), x, x_bytes));
    PST_RETURN_IF_ERROR(
        device_->CopyToDeviceAsync(staged_labels_[slot].data(), labels, sizeof(int32_t) * batch));
  }
  PST_RETURN_IF_ERROR(device_->RecordCopies(slot));
  staged_batch_[slot] = batch;
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceMlp::ScaledLossSumAndGradientsStaged(int slot, const ParamSet& params,
                                                                  float grad_scale,
                                                                  ParamSet* grads) {
  PST_RETURN_IF_ERROR(device_->WaitForCopies(slot));
  const int batch = staged_batch_[slot];
  if (batch <= 0) return absl::FailedPreconditionError("no batch staged in this slot");
  PST_RETURN_IF_ERROR(Reserve(batch, /*input=*/false));  // the input is in the slot
  return ComputeOnDevice(params, staged_x_[slot].f32(), staged_labels_[slot].i32(), batch,
                         grad_scale, grads);
}

absl::StatusOr<double> DeviceMlp::ComputeOnDevice(const ParamSet& params, const float* x,
                                                  const int32_t* labels, int batch,
                                                  float grad_scale, ParamSet* grads) {
  PST_RETURN_IF_ERROR(Upload(params));
  PST_RETURN_IF_ERROR(ForwardOnDevice(x, batch));

  const size_t num_layers = dims_.size() - 1;
  PST_RETURN_IF_ERROR(device_->SoftmaxCrossEntropy(
      batch, config_.num_classes, acts_[num_layers - 1].f32(), labels, grad_scale,
      row_loss_.f32(), dacts_[num_layers - 1].f32()));
  for (size_t l = num_layers; l-- > 0;) {
    const int in_dim = dims_[l];
    const int out_dim = dims_[l + 1];
    const float* dz = dacts_[l].f32();
    const float* in = l == 0 ? x : acts_[l - 1].f32();
    // dW = A_in^T * dZ; db = column sums of dZ.
    PST_RETURN_IF_ERROR(device_->Gemm(true, false, in_dim, out_dim, batch, 1.0f, in, in_dim, dz,
                                      out_dim, 0.0f, grads_[2 * l].f32(), out_dim));
    PST_RETURN_IF_ERROR(device_->ColumnSums(batch, out_dim, dz, grads_[2 * l + 1].f32()));
    if (l == 0) break;
    // dA_in = dZ * W^T, through the ReLU that produced A_in.
    float* din = dacts_[l - 1].f32();
    PST_RETURN_IF_ERROR(device_->Gemm(false, true, batch, in_dim, out_dim, 1.0f, dz, out_dim,
                                      params_[2 * l].f32(), out_dim, 0.0f, din, in_dim));
    PST_RETURN_IF_ERROR(
        device_->ReluGrad(static_cast<int64_t>(batch) * in_dim, acts_[l - 1].f32(), din));
  }

  grads->resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    (*grads)[i].resize(params[i].size());
    PST_RETURN_IF_ERROR(device_->CopyToHost((*grads)[i].data(), grads_[i].data(),
                                            Floats(static_cast<int64_t>(params[i].size()))));
  }
  host_row_loss_.resize(batch);
  PST_RETURN_IF_ERROR(device_->CopyToHost(host_row_loss_.data(), row_loss_.data(), Floats(batch)));
  double total = 0;
  for (float v : host_row_loss_) total += v;
  return total;
}

absl::StatusOr<float> DeviceMlp::LossAndGradients(const ParamSet& params, const float* x,
                                                  const int32_t* labels, int batch,
                                                  ParamSet* grads) {
  PST_RETURN_IF_ERROR(CheckArgs(config_, specs_, params, x, labels, batch));
  if (grads == nullptr) return absl::InvalidArgumentError("grads is null");
  PST_ASSIGN_OR_RETURN(
      double total,
      ScaledLossSumAndGradients(params, x, labels, batch, 1.0f / static_cast<float>(batch), grads));
  return static_cast<float>(total / batch);
}

absl::Status DeviceMlp::Forward(const ParamSet& params, const float* x, int batch,
                                std::vector<float>* logits) {
  PST_RETURN_IF_ERROR(CheckParamSizes(specs_, params));
  if (batch <= 0) return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  if (x == nullptr) return absl::InvalidArgumentError("x is null");
  if (logits == nullptr) return absl::InvalidArgumentError("logits is null");
  PST_RETURN_IF_ERROR(Upload(params));
  PST_RETURN_IF_ERROR(Reserve(batch));
  PST_RETURN_IF_ERROR(
      device_->CopyToDevice(x_.data(), x, Floats(static_cast<int64_t>(batch) * config_.input_dim)));
  PST_RETURN_IF_ERROR(ForwardOnDevice(x_.f32(), batch));
  logits->resize(static_cast<size_t>(batch) * config_.num_classes);
  return device_->CopyToHost(logits->data(), acts_.back().data(), Floats(logits->size()));
}

absl::StatusOr<Mlp::Eval> DeviceMlp::Evaluate(const ParamSet& params, const float* x,
                                              const int32_t* labels, int n) {
  if (n <= 0) return absl::InvalidArgumentError(absl::StrCat("n must be > 0, got ", n));
  PST_RETURN_IF_ERROR(CheckArgs(config_, specs_, params, x, labels, n));
  PST_RETURN_IF_ERROR(Upload(params));
  const int num_classes = config_.num_classes;
  const size_t input_dim = static_cast<size_t>(config_.input_dim);
  std::vector<float> logits;
  int64_t correct = 0;
  double total_loss = 0;
  for (int start = 0; start < n; start += kEvalChunk) {
    const int count = std::min(kEvalChunk, n - start);
    PST_RETURN_IF_ERROR(Reserve(count));
    PST_RETURN_IF_ERROR(device_->CopyToDevice(x_.data(), x + static_cast<size_t>(start) * input_dim,
                                              Floats(static_cast<int64_t>(count) * input_dim)));
    PST_RETURN_IF_ERROR(ForwardOnDevice(x_.f32(), count));
    logits.resize(static_cast<size_t>(count) * num_classes);
    PST_RETURN_IF_ERROR(
        device_->CopyToHost(logits.data(), acts_.back().data(), Floats(logits.size())));
    for (int r = 0; r < count; ++r) {
      const float* z = logits.data() + static_cast<size_t>(r) * num_classes;
      const int label = labels[start + r];
      total_loss += RowCrossEntropy(z, num_classes, label);
      if (std::max_element(z, z + num_classes) - z == label) ++correct;
    }
  }
  Mlp::Eval eval;
  eval.accuracy = static_cast<double>(correct) / n;
  eval.loss = total_loss / n;
  return eval;
}

MirroredMlp::MirroredMlp(MlpConfig config, std::vector<device::Device*> devices)
    : config_(std::move(config)), specs_(MlpParamSpecs(config_)) {
  for (device::Device* d : devices) replicas_.push_back(std::make_unique<DeviceMlp>(config_, d));
  replica_grads_.resize(replicas_.size());
}

std::vector<int> MirroredMlp::ShardSizes(int batch, int num_devices) {
  std::vector<int> sizes(num_devices, batch / num_devices);
  for (int i = 0; i < batch % num_devices; ++i) ++sizes[i];
  return sizes;
}

absl::StatusOr<float> MirroredMlp::LossAndGradients(const ParamSet& params, const float* x,
                                                    const int32_t* labels, int batch,
                                                    ParamSet* grads) {
  PST_RETURN_IF_ERROR(CheckArgs(config_, specs_, params, x, labels, batch));
  if (grads == nullptr) return absl::InvalidArgumentError("grads is null");
  const std::vector<int> sizes = ShardSizes(batch, num_replicas());
  const float grad_scale = 1.0f / static_cast<float>(batch);
  const std::vector<int> first = ShardStarts(sizes);
  return SumOverReplicas(sizes, batch, grads, [&](int i) {
    const size_t offset = static_cast<size_t>(first[i]);
    return replicas_[i]->ScaledLossSumAndGradients(params, x + offset * config_.input_dim,
                                                   labels + offset, sizes[i], grad_scale,
                                                   &replica_grads_[i]);
  });
}

absl::Status MirroredMlp::Stage(int slot, const float* x, const int32_t* labels, int batch) {
  if (slot < 0 || slot >= device::Device::kCopySlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("staging slot ", slot, " outside [0, ", device::Device::kCopySlots, ")"));
  }
  staged_batch_[slot] = 0;
  PST_RETURN_IF_ERROR(CheckArgs(config_, specs_, {}, x, labels, batch, /*check_params=*/false));
  const std::vector<int> sizes = ShardSizes(batch, num_replicas());
  const std::vector<int> first = ShardStarts(sizes);
  for (int i = 0; i < num_replicas(); ++i) {
    const size_t offset = static_cast<size_t>(first[i]);
    PST_RETURN_IF_ERROR(replicas_[i]->Stage(slot, x + offset * config_.input_dim,
                                            labels + offset, sizes[i]));
  }
  staged_batch_[slot] = batch;
  return absl::OkStatus();
}

absl::StatusOr<float> MirroredMlp::LossAndGradientsStaged(int slot, const ParamSet& params,
                                                          ParamSet* grads) {
  if (slot < 0 || slot >= device::Device::kCopySlots || staged_batch_[slot] <= 0) {
    return absl::FailedPreconditionError(absl::StrCat("no batch staged in slot ", slot));
  }
  PST_RETURN_IF_ERROR(CheckParamSizes(specs_, params));
  if (grads == nullptr) return absl::InvalidArgumentError("grads is null");
  const int batch = staged_batch_[slot];
  const std::vector<int> sizes = ShardSizes(batch, num_replicas());
  const float grad_scale = 1.0f / static_cast<float>(batch);
  return SumOverReplicas(sizes, batch, grads, [&](int i) {
    return replicas_[i]->ScaledLossSumAndGradientsStaged(slot, params, grad_scale,
                                                         &replica_grads_[i]);
  });
}

std::vector<int> MirroredMlp::ShardStarts(const std::vector<int>& sizes) {
  std::vector<int> first(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) first[i] = first[i - 1] + sizes[i - 1];
  return first;
}

absl::StatusOr<float> MirroredMlp::SumOverReplicas(
    const std::vector<int>& sizes, int batch, ParamSet* grads,
    const std::function<absl::StatusOr<double>(int)>& replica_step) {
  const int n = num_replicas();
  std::vector<absl::StatusOr<double>> results(n, 0.0);
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) {
    if (sizes[i] > 0) threads.emplace_back([&, i] { results[i] = replica_step(i); });
  }
  results[0] = replica_step(0);  // sizes[0] > 0: the first shard is never smaller than the others
  for (std::thread& t : threads) t.join();

  double total = 0;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] == 0) continue;
    if (!results[i].ok()) return results[i].status();
    total += *results[i];
  }
  // Sum the shards' gradients on the host, in device order.
  *grads = replica_grads_[0];
  for (int i = 1; i < n; ++i) {
    if (sizes[i] == 0) continue;
    for (size_t p = 0; p < grads->size(); ++p) {
      std::vector<float>& dst = (*grads)[p];
      const std::vector<float>& src = replica_grads_[i][p];
      for (size_t k = 0; k < dst.size(); ++k) dst[k] += src[k];
    }
  }
  return static_cast<float>(total / batch);
}

std::vector<std::string> DevicePlacementLines(
    absl::string_view job_prefix, const std::vector<const device::Device*>& devices,
    const std::function<void(const PlacementOp&)>& replica_ops) {
  std::vector<std::string> lines;
  for (const device::Device* device : devices) {
    const std::string where = absl::StrCat(job_prefix, "/device:", device->name());
    replica_ops([&](const std::string& name, const char* type) {
      lines.push_back(absl::StrCat(name, ": (", type, "): ", where));
    });
  }
  lines.push_back(absl::StrCat("gradients/CrossDeviceSum (", devices.size(),
                               " replicas, through host memory): (AddN): ", job_prefix,
                               "/device:CPU:0"));
  return lines;
}

std::vector<std::string> MirroredMlp::DevicePlacement(absl::string_view job_prefix) const {
  std::vector<const device::Device*> devices;
  for (const auto& replica : replicas_) devices.push_back(replica->device());
  const size_t num_layers = config_.hidden.size() + 1;
  return DevicePlacementLines(job_prefix, devices, [&](const PlacementOp& op) {
    for (const ParamSpec& spec : specs_) op(spec.name, "VariableCopy");
    op("input/CopyToDevice", "Copy");
    for (size_t l = 0; l < num_layers; ++l) {
      const std::string layer = absl::StrCat("dense_", l);
      op(layer + "/BiasAdd", "BiasAdd");
      op(layer + "/MatMul", "MatMul");
      if (l + 1 < num_layers) op(layer + "/Relu", "Relu");
    }
    op("loss/SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits");
    for (size_t l = num_layers; l-- > 0;) {
      const std::string layer = absl::StrCat("gradients/dense_", l);
      op(layer + "/MatMul_grad/kernel", "MatMul");
      op(layer + "/BiasAddGrad", "BiasAddGrad");
      if (l > 0) {
        op(layer + "/MatMul_grad/input", "MatMul");
        op(absl::StrCat("gradients/dense_", l - 1, "/ReluGrad"), "ReluGrad");
      }
    }
    op("gradients/CopyToHost", "Copy");
  });
}

absl::StatusOr<Mlp::Eval> MirroredMlp::Evaluate(const ParamSet& params, const float* x,
                                                const int32_t* labels, int n) {
  return replicas_[0]->Evaluate(params, x, labels, n);
}

}  // namespace pst::models
