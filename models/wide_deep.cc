#include "models/wide_deep.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::models {
namespace {

// Deep layer widths: dims[0] = F*D + num_dense, then the hidden widths, then 1.
std::vector<int> DeepDims(const WideDeepConfig& config) {
  std::vector<int> dims;
  dims.reserve(config.hidden.size() + 2);
  dims.push_back(config.num_fields * config.embedding_dim + config.num_dense);
  dims.insert(dims.end(), config.hidden.begin(), config.hidden.end());
  dims.push_back(1);
  return dims;
}

// Grows `v` to at least `n` elements; never shrinks it.
void EnsureSize(std::vector<float>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

absl::Status CheckConfig(const WideDeepConfig& config) {
  if (config.num_dense < 0 || config.num_fields < 0 || config.embedding_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WideDeepConfig needs num_dense >= 0, num_fields >= 0 and embedding_dim >= 1; got ",
        config.num_dense, ", ", config.num_fields, ", ", config.embedding_dim));
  }
  const int64_t in =
      static_cast<int64_t>(config.num_fields) * config.embedding_dim + config.num_dense;
  if (in < 1 || in > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("WideDeepConfig has a deep input width of ", in,
                                                   ", outside [1, ",
                                                   std::numeric_limits<int>::max(), "]"));
  }
  for (int h : config.hidden) {
    if (h <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("WideDeepConfig has a non-positive hidden width (", h, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckParams(const WideDeepConfig& config, const std::vector<ParamSpec>& specs,
                         const ParamSet& params) {
  PST_RETURN_IF_ERROR(CheckConfig(config));
  return CheckParamSizes(specs, params);
}

// Everything about `batch` except its labels.
absl::Status CheckBatch(const WideDeepConfig& config, const CtrBatch& batch) {
  if (batch.size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch size must be > 0, got ", batch.size));
  }
  if (batch.num_unique < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_unique must be >= 0, got ", batch.num_unique));
  }
  if (config.num_dense > 0 && batch.dense == nullptr) {
    return absl::InvalidArgumentError("batch.dense is null");
  }
  if (config.num_fields > 0 && batch.slot == nullptr) {
    return absl::InvalidArgumentError("batch.slot is null");
  }
  if (batch.num_unique > 0 && (batch.deep_rows == nullptr || batch.wide_rows == nullptr)) {
    return absl::InvalidArgumentError("batch.deep_rows or batch.wide_rows is null");
  }
  const int fields = config.num_fields;
  for (int i = 0; i < batch.size; ++i) {
    const int32_t* slots = batch.slot + static_cast<size_t>(i) * fields;
    for (int f = 0; f < fields; ++f) {
      if (slots[f] < 0 || slots[f] >= batch.num_unique) {
        return absl::InvalidArgumentError(absl::StrCat("slot of example ", i, ", field ", f, " is ",
                                                       slots[f], ", outside [0, ", batch.num_unique,
                                                       ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLabels(const CtrBatch& batch) {
  if (batch.labels == nullptr) return absl::InvalidArgumentError("batch.labels is null");
  for (int i = 0; i < batch.size; ++i) {
    const float y = batch.labels[i];
    if (y != 0.0f && y != 1.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("label of example ", i, " is ", y, ", expected 0 or 1"));
    }
  }
  return absl::OkStatus();
}

// Fills `input` [size, in] with each example's deep rows, field by field,
// followed by its dense features.
void GatherInput(const WideDeepConfig& config, const CtrBatch& batch, float* input) {
  const size_t dim = static_cast<size_t>(config.embedding_dim);
  const size_t fields = static_cast<size_t>(config.num_fields);
  const size_t num_dense = static_cast<size_t>(config.num_dense);
  const size_t in = fields * dim + num_dense;
  for (int i = 0; i < batch.size; ++i) {
    float* row = input + static_cast<size_t>(i) * in;
    const int32_t* slots = batch.slot + static_cast<size_t>(i) * fields;
    for (size_t f = 0; f < fields; ++f) {
      std::memcpy(row + f * dim, batch.deep_rows + static_cast<size_t>(slots[f]) * dim,
                  sizeof(float) * dim);
    }
    if (num_dense > 0) {
      std::memcpy(row + fields * dim, batch.dense + static_cast<size_t>(i) * num_dense,
                  sizeof(float) * num_dense);
    }
  }
}

// Runs the deep layers over `batch` rows of `input` (params[0] is the wide
// bias, so layer l's kernel and bias are params[1 + 2l] and params[2 + 2l]),
// then adds the wide part, leaving the logits in acts->back().
void ForwardLogits(const WideDeepConfig& config, const std::vector<int>& dims,
                   const ParamSet& params, const CtrBatch& batch, const float* input,
                   std::vector<std::vector<float>>* acts) {
  const int size = batch.size;
  const size_t num_layers = dims.size() - 1;
  acts->resize(num_layers);
  const float* in = input;
  for (size_t l = 0; l < num_layers; ++l) {
    const int in_dim = dims[l];
    const int out_dim = dims[l + 1];
    std::vector<float>& out = (*acts)[l];
    EnsureSize(&out, static_cast<size_t>(size) * out_dim);
    const float* kernel = params[1 + 2 * l].data();
    const float* bias = params[2 + 2 * l].data();
    for (int r = 0; r < size; ++r) {
      std::memcpy(out.data() + static_cast<size_t>(r) * out_dim, bias, sizeof(float) * out_dim);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, out_dim, in_dim, 1.0f, in, in_dim,
                kernel, out_dim, 1.0f, out.data(), out_dim);
    if (l + 1 < num_layers) {
      const size_t n = static_cast<size_t>(size) * out_dim;
      for (size_t i = 0; i < n; ++i) out[i] = std::max(out[i], 0.0f);
    }
    in = out.data();
  }
  // The last layer has one unit: acts->back()[i] is example i's deep logit.
  float* logits = acts->back().data();
  const float wide_bias = params[0][0];
  const int fields = config.num_fields;
  for (int i = 0; i < size; ++i) {
    const int32_t* slots = batch.slot + static_cast<size_t>(i) * fields;
    float wide = wide_bias;
    for (int f = 0; f < fields; ++f) wide += batch.wide_rows[slots[f]];
    logits[i] += wide;
  }
}

}  // namespace

absl::Status CheckWideDeepInputs(const WideDeepConfig& config, const ParamSet& dense,
                                 const CtrBatch& batch, bool check_labels) {
  PST_RETURN_IF_ERROR(CheckParams(config, WideDeepDenseSpecs(config), dense));
  PST_RETURN_IF_ERROR(CheckBatch(config, batch));
  return check_labels ? CheckLabels(batch) : absl::OkStatus();
}

std::vector<int> WideDeepLayerDims(const WideDeepConfig& config) { return DeepDims(config); }

std::vector<ParamSpec> WideDeepDenseSpecs(const WideDeepConfig& config) {
  std::vector<ParamSpec> specs;
  ParamSpec wide_bias;
  wide_bias.name = "wide/bias";
  wide_bias.shape = {1};
  specs.push_back(std::move(wide_bias));
  AppendDenseLayerSpecs(DeepDims(config), "deep/", &specs);
  return specs;
}

WideDeep::WideDeep(WideDeepConfig config)
    : config_(std::move(config)), specs_(WideDeepDenseSpecs(config_)) {}

absl::StatusOr<float> WideDeep::LossAndGradients(const ParamSet& dense, const CtrBatch& batch,
                                                 ParamSet* dense_grads,
                                                 std::vector<float>* deep_row_grads,
                                                 std::vector<float>* wide_row_grads) {
  PST_RETURN_IF_ERROR(CheckParams(config_, specs_, dense));
  PST_RETURN_IF_ERROR(CheckBatch(config_, batch));
  PST_RETURN_IF_ERROR(CheckLabels(batch));
  if (dense_grads == nullptr || deep_row_grads == nullptr || wide_row_grads == nullptr) {
    return absl::InvalidArgumentError("a gradient output is null");
  }

  const std::vector<int> dims = DeepDims(config_);
  const size_t num_layers = dims.size() - 1;
  const int size = batch.size;
  const size_t in0 = static_cast<size_t>(dims[0]);
  EnsureSize(&input_, static_cast<size_t>(size) * in0);
  GatherInput(config_, batch, input_.data());
  ForwardLogits(config_, dims, dense, batch, input_.data(), &acts_);
  dacts_.resize(num_layers);

  // Loss max(z, 0) - z*y + log(1 + exp(-|z|)), and dz = (sigmoid(z) - y) / size.
  const float* logits = acts_.back().data();
  std::vector<float>& dlogits = dacts_.back();
  EnsureSize(&dlogits, static_cast<size_t>(size));
  const float inv_size = 1.0f / static_cast<float>(size);
  double total_loss = 0;
  for (int i = 0; i < size; ++i) {
    const double z = logits[i];
    const double y = batch.labels[i];
    total_loss += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
    dlogits[i] = (Sigmoid(logits[i]) - batch.labels[i]) * inv_size;
  }

  dense_grads->resize(dense.size());
  for (size_t i = 0; i < dense.size(); ++i) (*dense_grads)[i].resize(dense[i].size());
  const size_t dim = static_cast<size_t>(config_.embedding_dim);
  const size_t fields = static_cast<size_t>(config_.num_fields);
  deep_row_grads->assign(static_cast<size_t>(batch.num_unique) * dim, 0.0f);
  wide_row_grads->assign(static_cast<size_t>(batch.num_unique), 0.0f);

  // Wide part: the logit gradient reaches the wide bias and, once per
  // occurrence, each wide row.
  float wide_bias_grad = 0;
  for (int i = 0; i < size; ++i) {
    wide_bias_grad += dlogits[i];
    const int32_t* slots = batch.slot + static_cast<size_t>(i) * fields;
    for (size_t f = 0; f < fields; ++f) (*wide_row_grads)[slots[f]] += dlogits[i];
  }
  (*dense_grads)[0][0] = wide_bias_grad;

  // Deep part, as in Mlp, down to the gathered input.
  for (size_t l = num_layers; l-- > 0;) {
    const int in_dim = dims[l];
    const int out_dim = dims[l + 1];
    const float* dz = dacts_[l].data();
    const float* in = l == 0 ? input_.data() : acts_[l - 1].data();
    // dW = A_in^T * dZ.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, out_dim, size, 1.0f, in, in_dim,
                dz, out_dim, 0.0f, (*dense_grads)[1 + 2 * l].data(), out_dim);
    // db = column sums of dZ.
    float* db = (*dense_grads)[2 + 2 * l].data();
    std::fill(db, db + out_dim, 0.0f);
    for (int r = 0; r < size; ++r) {
      const float* dz_row = dz + static_cast<size_t>(r) * out_dim;
      for (int j = 0; j < out_dim; ++j) db[j] += dz_row[j];
    }
    // dA_in = dZ * W^T.
    std::vector<float>& din = l == 0 ? dinput_ : dacts_[l - 1];
    EnsureSize(&din, static_cast<size_t>(size) * in_dim);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, size, in_dim, out_dim, 1.0f, dz, out_dim,
                dense[1 + 2 * l].data(), out_dim, 0.0f, din.data(), in_dim);
    if (l == 0) break;
    // Through the ReLU that produced A_in.
    const size_t n = static_cast<size_t>(size) * in_dim;
    for (size_t i = 0; i < n; ++i) {
      if (!(in[i] > 0.0f)) din[i] = 0.0f;
    }
  }

  // Scatter-add the input gradient's embedding columns into the rows.
  for (int i = 0; i < size; ++i) {
    const float* drow = dinput_.data() + static_cast<size_t>(i) * in0;
    const int32_t* slots = batch.slot + static_cast<size_t>(i) * fields;
    for (size_t f = 0; f < fields; ++f) {
      float* g = deep_row_grads->data() + static_cast<size_t>(slots[f]) * dim;
      const float* src = drow + f * dim;
      for (size_t d = 0; d < dim; ++d) g[d] += src[d];
    }
  }
  return static_cast<float>(total_loss / size);
}

absl::Status WideDeep::Predict(const ParamSet& dense, const CtrBatch& batch,
                               std::vector<float>* probs) {
  PST_RETURN_IF_ERROR(CheckParams(config_, specs_, dense));
  PST_RETURN_IF_ERROR(CheckBatch(config_, batch));
  if (probs == nullptr) return absl::InvalidArgumentError("probs is null");
  const std::vector<int> dims = DeepDims(config_);
  EnsureSize(&input_, static_cast<size_t>(batch.size) * dims[0]);
  GatherInput(config_, batch, input_.data());
  ForwardLogits(config_, dims, dense, batch, input_.data(), &acts_);
  const float* logits = acts_.back().data();
  probs->resize(batch.size);
  for (int i = 0; i < batch.size; ++i) (*probs)[i] = Sigmoid(logits[i]);
  return absl::OkStatus();
}

}  // namespace pst::models
