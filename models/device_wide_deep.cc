#include "models/device_wide_deep.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/device_mlp.h"

namespace pst::models {
namespace {

size_t Floats(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

// The checks both LossAndGradients make before computing anything.
absl::Status CheckTrainingArgs(const WideDeepConfig& config, const ParamSet& dense,
                               const CtrBatch& batch, const ParamSet* dense_grads,
                               const std::vector<float>* deep_row_grads,
                               const std::vector<float>* wide_row_grads) {
  PST_RETURN_IF_ERROR(CheckWideDeepInputs(config, dense, batch, /*check_labels=*/true));
  if (dense_grads == nullptr || deep_row_grads == nullptr || wide_row_grads == nullptr) {
    return absl::InvalidArgumentError("a gradient output is null");
  }
  return absl::OkStatus();
}

}  // namespace

DeviceWideDeep::DeviceWideDeep(WideDeepConfig config, device::Device* device)
    : config_(std::move(config)), dims_(WideDeepLayerDims(config_)), device_(device) {
  const size_t num_params = WideDeepDenseSpecs(config_).size();
  params_.resize(num_params);
  grads_.resize(num_params);
  acts_.resize(dims_.size() - 1);
  dacts_.resize(dims_.size() - 1);
}

absl::Status DeviceWideDeep::Upload(const ParamSet& dense, const CtrBatch& batch, bool labels) {
  device::Device& d = *device_;
  for (size_t i = 0; i < dense.size(); ++i) {
    const size_t bytes = Floats(static_cast<int64_t>(dense[i].size()));
    PST_RETURN_IF_ERROR(d.EnsureCapacity(&params_[i], bytes));
    PST_RETURN_IF_ERROR(d.EnsureCapacity(&grads_[i], bytes));
    PST_RETURN_IF_ERROR(d.CopyToDevice(params_[i].data(), dense[i].data(), bytes));
  }
  const int64_t size = batch.size;
  const int64_t fields = config_.num_fields;
  const int64_t dim = config_.embedding_dim;
  const int64_t unique = batch.num_unique;
  // Every buffer gets at least one element, so that none is null.
  auto reserve = [&](device::DeviceBuffer* b, size_t bytes) {
    return d.EnsureCapacity(b, std::max<size_t>(bytes, sizeof(float)));
  };
  PST_RETURN_IF_ERROR(reserve(&emb_, Floats(size * fields * dim)));
  PST_RETURN_IF_ERROR(reserve(&demb_, Floats(size * fields * dim)));
  PST_RETURN_IF_ERROR(reserve(&dense_x_, Floats(size * config_.num_dense)));
  PST_RETURN_IF_ERROR(reserve(&slot_, sizeof(int32_t) * size * fields));
  PST_RETURN_IF_ERROR(reserve(&labels_, Floats(size)));
  PST_RETURN_IF_ERROR(reserve(&row_loss_, Floats(size)));
  PST_RETURN_IF_ERROR(reserve(&wide_, Floats(size * fields)));
  PST_RETURN_IF_ERROR(reserve(&deep_rows_, Floats(unique * dim)));
  PST_RETURN_IF_ERROR(reserve(&deep_row_grads_, Floats(unique * dim)));
  PST_RETURN_IF_ERROR(reserve(&wide_rows_, Floats(unique)));
  PST_RETURN_IF_ERROR(reserve(&wide_row_grads_, Floats(unique)));
  const int64_t num_ones = std::max<int64_t>(fields, 1);
  if (ones_.bytes() < Floats(num_ones)) {
    PST_RETURN_IF_ERROR(reserve(&ones_, Floats(num_ones)));
    PST_RETURN_IF_ERROR(d.Fill(num_ones, 1.0f, ones_.f32()));
  }
  for (size_t l = 0; l + 1 < dims_.size(); ++l) {
    PST_RETURN_IF_ERROR(reserve(&acts_[l], Floats(size * dims_[l + 1])));
    PST_RETURN_IF_ERROR(reserve(&dacts_[l], Floats(size * dims_[l + 1])));
  }
  PST_RETURN_IF_ERROR(
      d.CopyToDevice(dense_x_.data(), batch.dense, Floats(size * config_.num_dense)));
  PST_RETURN_IF_ERROR(d.CopyToDevice(slot_.data(), batch.slot, sizeof(int32_t) * size * fields));
  PST_RETURN_IF_ERROR(d.CopyToDevice(deep_rows_.data(), batch.deep_rows, Floats(unique * dim)));
  PST_RETURN_IF_ERROR(d.CopyToDevice(wide_rows_.data(), batch.wide_rows, Floats(unique)));
  if (labels) PST_RETURN_IF_ERROR(d.CopyToDevice(labels_.data(), batch.labels, Floats(size)));
  return absl::OkStatus();
}

absl::Status DeviceWideDeep::Forward(int size) {
  device::Device& d = *device_;
  const int fields = config_.num_fields;
  const int emb_width = fields * config_.embedding_dim;
  const int num_dense = config_.num_dense;
  if (emb_width > 0) {
    PST_RETURN_IF_ERROR(d.GatherRows(size * fields, config_.embedding_dim, deep_rows_.f32(),
                                     slot_.i32(), fields, emb_width, emb_.f32()));
  }
  const size_t num_layers = dims_.size() - 1;
  for (size_t l = 0; l < num_layers; ++l) {
    const int out_dim = dims_[l + 1];
    float* out = acts_[l].f32();
    const float* kernel = params_[1 + 2 * l].f32();
    const int64_t n = static_cast<int64_t>(size) * out_dim;
    PST_RETURN_IF_ERROR(d.Fill(n, 0.0f, out));
    PST_RETURN_IF_ERROR(d.BiasAdd(size, out_dim, params_[2 + 2 * l].f32(), out));
    if (l == 0) {
      // [emb, dense] * W = emb * W[0:F*D] + dense * W[F*D:].
      if (emb_width > 0) {
        PST_RETURN_IF_ERROR(d.Gemm(false, false, size, out_dim, emb_width, 1.0f, emb_.f32(),
                                   emb_width, kernel, out_dim, 1.0f, out, out_dim));
      }
      if (num_dense > 0) {
        PST_RETURN_IF_ERROR(d.Gemm(false, false, size, out_dim, num_dense, 1.0f, dense_x_.f32(),
                                   num_dense, kernel + static_cast<size_t>(emb_width) * out_dim,
                                   out_dim, 1.0f, out, out_dim));
      }
    } else {
      const int in_dim = dims_[l];
      PST_RETURN_IF_ERROR(d.Gemm(false, false, size, out_dim, in_dim, 1.0f, acts_[l - 1].f32(),
                                 in_dim, kernel, out_dim, 1.0f, out, out_dim));
    }
    if (l + 1 < num_layers) PST_RETURN_IF_ERROR(d.Relu(n, out));
  }
  // logit += wide bias + sum_f wide_rows[slot_f].
  float* logits = acts_.back().f32();
  if (fields > 0) {
    PST_RETURN_IF_ERROR(
        d.GatherRows(size * fields, 1, wide_rows_.f32(), slot_.i32(), fields, fields, wide_.f32()));
    PST_RETURN_IF_ERROR(d.Gemm(false, false, size, 1, fields, 1.0f, wide_.f32(), fields,
                               ones_.f32(), 1, 1.0f, logits, 1));
  }
  return d.BiasAdd(size, 1, params_[0].f32(), logits);
}

absl::StatusOr<double> DeviceWideDeep::ScaledLossSumAndGradients(
    const ParamSet& dense, const CtrBatch& batch, float grad_scale, ParamSet* dense_grads,
    std::vector<float>* deep_row_grads, std::vector<float>* wide_row_grads) {
  device::Device& d = *device_;
  const int size = batch.size;
  const int fields = config_.num_fields;
  const int dim = config_.embedding_dim;
  const int emb_width = fields * dim;
  const int num_dense = config_.num_dense;
  const int64_t unique = batch.num_unique;
  PST_RETURN_IF_ERROR(Upload(dense, batch, /*labels=*/true));
  PST_RETURN_IF_ERROR(Forward(size));

  const size_t num_layers = dims_.size() - 1;
  float* dlogits = dacts_.back().f32();
  PST_RETURN_IF_ERROR(d.SigmoidCrossEntropy(size, acts_.back().f32(), labels_.f32(), grad_scale,
                                            row_loss_.f32(), dlogits));
  // Wide part: the bias gets the summed logit gradient, and each wide row
  // the logit gradient once per occurrence (broadcast over the fields).
  PST_RETURN_IF_ERROR(d.ColumnSums(size, 1, dlogits, grads_[0].f32()));
  PST_RETURN_IF_ERROR(d.Fill(std::max<int64_t>(unique, 1), 0.0f, wide_row_grads_.f32()));
  PST_RETURN_IF_ERROR(d.Fill(std::max<int64_t>(unique * dim, 1), 0.0f, deep_row_grads_.f32()));
  if (fields > 0) {
    PST_RETURN_IF_ERROR(d.Gemm(false, false, size, fields, 1, 1.0f, dlogits, 1, ones_.f32(),
                               fields, 0.0f, wide_.f32(), fields));
    PST_RETURN_IF_ERROR(d.ScatterAddRows(size * fields, 1, wide_.f32(), fields, fields,
                                         slot_.i32(), wide_row_grads_.f32()));
  }
  // Deep part, as in DeviceMlp, down to the gathered rows.
  for (size_t l = num_layers; l-- > 0;) {
    const int out_dim = dims_[l + 1];
    const float* dz = dacts_[l].f32();
    float* dkernel = grads_[1 + 2 * l].f32();
    const float* kernel = params_[1 + 2 * l].f32();
    PST_RETURN_IF_ERROR(d.ColumnSums(size, out_dim, dz, grads_[2 + 2 * l].f32()));
    if (l > 0) {
      const int in_dim = dims_[l];
      const float* in = acts_[l - 1].f32();
      PST_RETURN_IF_ERROR(d.Gemm(true, false, in_dim, out_dim, size, 1.0f, in, in_dim, dz,
                                 out_dim, 0.0f, dkernel, out_dim));
      float* din = dacts_[l - 1].f32();
      PST_RETURN_IF_ERROR(d.Gemm(false, true, size, in_dim, out_dim, 1.0f, dz, out_dim, kernel,
                                 out_dim, 0.0f, din, in_dim));
      PST_RETURN_IF_ERROR(d.ReluGrad(static_cast<int64_t>(size) * in_dim, in, din));
      continue;
    }
    if (emb_width > 0) {
      PST_RETURN_IF_ERROR(d.Gemm(true, false, emb_width, out_dim, size, 1.0f, emb_.f32(),
                                 emb_width, dz, out_dim, 0.0f, dkernel, out_dim));
      PST_RETURN_IF_ERROR(d.Gemm(false, true, size, emb_width, out_dim, 1.0f, dz, out_dim, kernel,
                                 out_dim, 0.0f, demb_.f32(), emb_width));
      PST_RETURN_IF_ERROR(d.ScatterAddRows(size * fields, dim, demb_.f32(), fields, emb_width,
                                           slot_.i32(), deep_row_grads_.f32()));
    }
    if (num_dense > 0) {
      PST_RETURN_IF_ERROR(d.Gemm(true, false, num_dense, out_dim, size, 1.0f, dense_x_.f32(),
                                 num_dense, dz, out_dim, 0.0f,
                                 dkernel + static_cast<size_t>(emb_width) * out_dim, out_dim));
    }
  }

  // Every gradient and the losses come back in one trip: the copies queued
  // into one page-locked buffer, one wait, then spread out on the host
  // (one wait each cost more than the math at small batches).
  dense_grads->resize(dense.size());
  deep_row_grads->resize(static_cast<size_t>(unique) * dim);
  wide_row_grads->resize(static_cast<size_t>(unique));
  host_row_loss_.resize(size);
  // Each part: a host vector, sized, and the device buffer it comes from.
  std::vector<std::pair<std::vector<float>*, const float*>> parts;
  for (size_t i = 0; i < dense.size(); ++i) {
    (*dense_grads)[i].resize(dense[i].size());
    parts.emplace_back(&(*dense_grads)[i], grads_[i].f32());
  }
  parts.emplace_back(deep_row_grads, deep_row_grads_.f32());
  parts.emplace_back(wide_row_grads, wide_row_grads_.f32());
  parts.emplace_back(&host_row_loss_, row_loss_.f32());
  size_t floats = 0;
  for (const auto& [host, device] : parts) floats += host->size();
  if (download_.bytes() < Floats(static_cast<int64_t>(floats))) {
    // With room to spare: a batch with more unique ids does not reallocate.
    PST_ASSIGN_OR_RETURN(download_, d.AllocateHost(Floats(static_cast<int64_t>(floats * 5 / 4))));
  }
  size_t at = 0;
  for (const auto& [host, device] : parts) {
    PST_RETURN_IF_ERROR(d.CopyToHostAsync(download_.f32() + at, device,
                                          Floats(static_cast<int64_t>(host->size()))));
    at += host->size();
  }
  PST_RETURN_IF_ERROR(d.Synchronize());
  at = 0;
  for (const auto& [host, device] : parts) {
    std::copy_n(download_.f32() + at, host->size(), host->data());
    at += host->size();
  }
  double total = 0;
  for (float v : host_row_loss_) total += v;
  return total;
}

absl::StatusOr<float> DeviceWideDeep::LossAndGradients(const ParamSet& dense,
                                                       const CtrBatch& batch,
                                                       ParamSet* dense_grads,
                                                       std::vector<float>* deep_row_grads,
                                                       std::vector<float>* wide_row_grads) {
  PST_RETURN_IF_ERROR(CheckTrainingArgs(config_, dense, batch, dense_grads, deep_row_grads,
                                        wide_row_grads));
  PST_ASSIGN_OR_RETURN(const double total,
                       ScaledLossSumAndGradients(dense, batch, 1.0f / batch.size, dense_grads,
                                                 deep_row_grads, wide_row_grads));
  return static_cast<float>(total / batch.size);
}

absl::Status DeviceWideDeep::Predict(const ParamSet& dense, const CtrBatch& batch,
                                     std::vector<float>* probs) {
  PST_RETURN_IF_ERROR(CheckWideDeepInputs(config_, dense, batch, /*check_labels=*/false));
  if (probs == nullptr) return absl::InvalidArgumentError("probs is null");
  PST_RETURN_IF_ERROR(Upload(dense, batch, /*labels=*/false));
  PST_RETURN_IF_ERROR(Forward(batch.size));
  probs->resize(batch.size);
  PST_RETURN_IF_ERROR(device_->CopyToHost(probs->data(), acts_.back().data(), Floats(batch.size)));
  for (float& p : *probs) p = Sigmoid(p);
  return absl::OkStatus();
}

MirroredWideDeep::MirroredWideDeep(WideDeepConfig config, std::vector<device::Device*> devices)
    : config_(std::move(config)) {
  for (device::Device* d : devices)
    replicas_.push_back(std::make_unique<DeviceWideDeep>(config_, d));
  replica_grads_.resize(replicas_.size());
}

absl::StatusOr<float> MirroredWideDeep::LossAndGradients(const ParamSet& dense,
                                                         const CtrBatch& batch,
                                                         ParamSet* dense_grads,
                                                         std::vector<float>* deep_row_grads,
                                                         std::vector<float>* wide_row_grads) {
  PST_RETURN_IF_ERROR(CheckTrainingArgs(config_, dense, batch, dense_grads, deep_row_grads,
                                        wide_row_grads));
  const int n = num_replicas();
  const std::vector<int> sizes = MirroredMlp::ShardSizes(batch.size, n);
  const float grad_scale = 1.0f / static_cast<float>(batch.size);
  std::vector<absl::StatusOr<double>> results(n, 0.0);
  auto run = [&](int i, int first) {
    CtrBatch shard = batch;
    shard.size = sizes[i];
    shard.dense += static_cast<size_t>(first) * config_.num_dense;
    shard.slot += static_cast<size_t>(first) * config_.num_fields;
    shard.labels += first;
    ReplicaGrads& g = replica_grads_[i];
    results[i] = replicas_[i]->ScaledLossSumAndGradients(dense, shard, grad_scale, &g.dense,
                                                         &g.deep_rows, &g.wide_rows);
  };
  std::vector<std::thread> threads;
  int first = sizes[0];
  for (int i = 1; i < n; ++i) {
    if (sizes[i] > 0) threads.emplace_back(run, i, first);
    first += sizes[i];
  }
  run(0, 0);  // the first shard is never empty
  for (std::thread& t : threads) t.join();

  double total = 0;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] == 0) continue;
    if (!results[i].ok()) return results[i].status();
    total += *results[i];
  }
  auto add = [](const std::vector<float>& src, std::vector<float>* dst) {
    for (size_t k = 0; k < dst->size(); ++k) (*dst)[k] += src[k];
  };
  *dense_grads = replica_grads_[0].dense;
  *deep_row_grads = replica_grads_[0].deep_rows;
  *wide_row_grads = replica_grads_[0].wide_rows;
  for (int i = 1; i < n; ++i) {
    if (sizes[i] == 0) continue;
    for (size_t p = 0; p < dense_grads->size(); ++p) {
      add(replica_grads_[i].dense[p], &(*dense_grads)[p]);
    }
    add(replica_grads_[i].deep_rows, deep_row_grads);
    add(replica_grads_[i].wide_rows, wide_row_grads);
  }
  return static_cast<float>(total / batch.size);
}

absl::Status MirroredWideDeep::Predict(const ParamSet& dense, const CtrBatch& batch,
                                       std::vector<float>* probs) {
  return replicas_[0]->Predict(dense, batch, probs);
}

std::vector<std::string> MirroredWideDeep::DevicePlacement(absl::string_view job_prefix) const {
  std::vector<const device::Device*> devices;
  for (const auto& replica : replicas_) devices.push_back(replica->device());
  const std::vector<ParamSpec> specs = WideDeepDenseSpecs(config_);
  const size_t num_layers = config_.hidden.size() + 1;
  return DevicePlacementLines(job_prefix, devices, [&](const PlacementOp& op) {
    for (const ParamSpec& spec : specs) op(spec.name, "VariableCopy");
    op("embedding_rows/CopyToDevice", "Copy");
    op("deep_embedding/Gather", "GatherV2");
    for (size_t l = 0; l < num_layers; ++l) {
      const std::string layer = absl::StrCat("deep/dense_", l);
      op(layer + "/MatMul", "MatMul");
      op(layer + "/BiasAdd", "BiasAdd");
      if (l + 1 < num_layers) op(layer + "/Relu", "Relu");
    }
    op("wide_embedding/Gather", "GatherV2");
    op("wide/Sum", "MatMul");
    op("loss/SigmoidCrossEntropyWithLogits", "SigmoidCrossEntropyWithLogits");
    op("gradients/wide_embedding/ScatterAdd", "ScatterAdd");
    op("gradients/deep_embedding/ScatterAdd", "ScatterAdd");
    op("gradients/CopyToHost", "Copy");
  });
}

}  // namespace pst::models
