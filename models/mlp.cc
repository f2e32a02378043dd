#include "models/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::models {
namespace {

// Evaluate works through its examples this many at a time, so its scratch
// memory stays bounded however many examples it is given.
constexpr int kEvalChunk = 1000;

// Layer widths: dims[0] = input_dim, then the hidden widths, then classes.
std::vector<int> LayerDims(const MlpConfig& config) {
  std::vector<int> dims;
  dims.reserve(config.hidden.size() + 2);
  dims.push_back(config.input_dim);
  dims.insert(dims.end(), config.hidden.begin(), config.hidden.end());
  dims.push_back(config.num_classes);
  return dims;
}

// Grows `v` to at least `n` elements; never shrinks it, so buffers sized for
// the largest batch seen are kept.
void EnsureSize(std::vector<float>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

absl::Status CheckLabels(const int32_t* labels, int n, int num_classes) {
  if (labels == nullptr) return absl::InvalidArgumentError("labels is null");
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("label of example ", i, " is ", labels[i],
                                                     ", outside [0, ", num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

// x[r, j] += bias[j] for x [rows, cols].
void AddBias(int rows, int cols, const float* __restrict bias, float* __restrict x) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = x + static_cast<size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

// x[r, j] = max(x[r, j] + bias[j], 0): a hidden layer's bias and ReLU.
void AddBiasRelu(int rows, int cols, const float* __restrict bias, float* __restrict x) {
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = x + static_cast<size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
  }
}

// Through the ReLU that produced `act`: dz = 0 where act <= 0. Sums the
// result's columns into `db` on the way (the bias gradient of the layer
// whose output `act` is), so that dz is read once for both.
void ReluGradColumnSums(int rows, int cols, const float* __restrict act, float* __restrict dz,
                        float* __restrict db) {
  std::fill(db, db + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* __restrict a = act + static_cast<size_t>(r) * cols;
    float* __restrict d = dz + static_cast<size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) {
      d[j] = a[j] > 0.0f ? d[j] : 0.0f;
      db[j] += d[j];
    }
  }
}

// Runs the layers over `batch` rows of `x`, leaving layer l's output in
// (*acts)[l]: post-ReLU for hidden layers, logits for the last one.
// `params` must already have passed CheckParams.
void ForwardLayers(const std::vector<int>& dims, const ParamSet& params, const float* x, int batch,
                   std::vector<std::vector<float>>* acts) {
  const size_t num_layers = dims.size() - 1;
  acts->resize(num_layers);
  const float* in = x;
  for (size_t l = 0; l < num_layers; ++l) {
    const int in_dim = dims[l];
    const int out_dim = dims[l + 1];
    std::vector<float>& out = (*acts)[l];
    EnsureSize(&out, static_cast<size_t>(batch) * out_dim);
    const float* kernel = params[2 * l].data();
    const float* bias = params[2 * l + 1].data();
    // X * W, then the bias and the ReLU in one pass over the result (as a
    // framework fuses them), not a pass of its own each.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, out_dim, in_dim, 1.0f, in, in_dim,
                kernel, out_dim, 0.0f, out.data(), out_dim);
    if (l + 1 < num_layers) {
      AddBiasRelu(batch, out_dim, bias, out.data());
    } else {
      AddBias(batch, out_dim, bias, out.data());
    }
    in = out.data();
  }
}

// Cross-entropy of one row of logits against `label`, computed as
// log-sum-exp(z) - z[label] with the row maximum subtracted first.
// If `probs` is non-null it receives softmax(z).
double RowCrossEntropy(const float* z, int num_classes, int label, float* probs) {
  const float max = *std::max_element(z, z + num_classes);
  double sum = 0;
  for (int j = 0; j < num_classes; ++j) {
    const float e = std::exp(z[j] - max);
    if (probs != nullptr) probs[j] = e;
    sum += e;
  }
  if (probs != nullptr) {
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < num_classes; ++j) probs[j] *= inv;
  }
  return std::log(sum) + static_cast<double>(max) - static_cast<double>(z[label]);
}

}  // namespace

void AppendDenseLayerSpecs(const std::vector<int>& dims, const std::string& prefix,
                           std::vector<ParamSpec>* specs) {
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const int in = dims[l];
    const int out = dims[l + 1];
    ParamSpec kernel;
    kernel.name = absl::StrCat(prefix, "dense_", l, "/kernel");
    kernel.shape = {in, out};
    kernel.is_kernel = true;
    kernel.fan_in = in;
    kernel.fan_out = out;
    specs->push_back(std::move(kernel));
    ParamSpec bias;
    bias.name = absl::StrCat(prefix, "dense_", l, "/bias");
    bias.shape = {out};
    specs->push_back(std::move(bias));
  }
}

std::vector<ParamSpec> MlpParamSpecs(const MlpConfig& config) {
  std::vector<ParamSpec> specs;
  AppendDenseLayerSpecs(LayerDims(config), "", &specs);
  return specs;
}

Mlp::Mlp(MlpConfig config)
    : config_(std::move(config)), specs_(MlpParamSpecs(config_)), dims_(LayerDims(config_)) {}

absl::Status Mlp::CheckParams(const ParamSet& params) const {
  for (int d : dims_) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("MlpConfig has a non-positive layer width (", d, ")"));
    }
  }
  return CheckParamSizes(specs_, params);
}

absl::Status CheckParamSizes(const std::vector<ParamSpec>& specs, const ParamSet& params) {
  if (params.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", specs.size(), " parameter tensors, got ", params.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t expected = 1;
    for (int64_t d : specs[i].shape) expected *= d;
    if (static_cast<int64_t>(params[i].size()) != expected) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", specs[i].name, " has ",
                                                     params[i].size(), " elements, expected ",
                                                     expected));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Mlp::LossAndGradients(const ParamSet& params, const float* x,
                                            const int32_t* labels, int batch, ParamSet* grads) {
  PST_RETURN_IF_ERROR(CheckParams(params));
  if (batch <= 0) return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  if (x == nullptr) return absl::InvalidArgumentError("x is null");
  if (grads == nullptr) return absl::InvalidArgumentError("grads is null");
  const int num_classes = config_.num_classes;
  PST_RETURN_IF_ERROR(CheckLabels(labels, batch, num_classes));

  const std::vector<int>& dims = dims_;
  const size_t num_layers = dims.size() - 1;
  ForwardLayers(dims, params, x, batch, &acts_);
  dacts_.resize(num_layers);

  grads->resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) (*grads)[i].resize(params[i].size());

  // dZ of the last layer: (softmax(z) - onehot(label)) / batch, its rows
  // summed into the last bias's gradient as they are made.
  std::vector<float>& dlogits = dacts_[num_layers - 1];
  EnsureSize(&dlogits, static_cast<size_t>(batch) * num_classes);
  const float* logits = acts_[num_layers - 1].data();
  const float inv_batch = 1.0f / static_cast<float>(batch);
  float* dlogits_bias = (*grads)[2 * (num_layers - 1) + 1].data();
  std::fill(dlogits_bias, dlogits_bias + num_classes, 0.0f);
  double total_loss = 0;
  for (int r = 0; r < batch; ++r) {
    const size_t row = static_cast<size_t>(r) * num_classes;
    float* p = dlogits.data() + row;
    total_loss += RowCrossEntropy(logits + row, num_classes, labels[r], p);
    p[labels[r]] -= 1.0f;
    for (int j = 0; j < num_classes; ++j) {
      p[j] *= inv_batch;
      dlogits_bias[j] += p[j];
    }
  }

  for (size_t l = num_layers; l-- > 0;) {
    const int in_dim = dims[l];
    const int out_dim = dims[l + 1];
    const float* dz = dacts_[l].data();
    const float* in = l == 0 ? x : acts_[l - 1].data();
    // dW = A_in^T * dZ.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in_dim, out_dim, batch, 1.0f, in, in_dim,
                dz, out_dim, 0.0f, (*grads)[2 * l].data(), out_dim);
    // db, the column sums of dZ, was summed where dZ was made: above for
    // the last layer, with its ReLU's gradient (below) for a hidden one.
    if (l == 0) break;
    // dA_in = dZ * W^T, then through the ReLU that produced A_in: the
    // gradient passes only where the activation is positive.
    std::vector<float>& din = dacts_[l - 1];
    EnsureSize(&din, static_cast<size_t>(batch) * in_dim);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, in_dim, out_dim, 1.0f, dz, out_dim,
                params[2 * l].data(), out_dim, 0.0f, din.data(), in_dim);
    ReluGradColumnSums(batch, in_dim, in, din.data(), (*grads)[2 * (l - 1) + 1].data());
  }
  return static_cast<float>(total_loss / batch);
}

absl::Status Mlp::Forward(const ParamSet& params, const float* x, int batch,
                          std::vector<float>* logits) {
  PST_RETURN_IF_ERROR(CheckParams(params));
  if (batch <= 0) return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  if (x == nullptr) return absl::InvalidArgumentError("x is null");
  if (logits == nullptr) return absl::InvalidArgumentError("logits is null");
  const std::vector<int>& dims = dims_;
  ForwardLayers(dims, params, x, batch, &acts_);
  const size_t n = static_cast<size_t>(batch) * config_.num_classes;
  const float* out = acts_.back().data();
  logits->assign(out, out + n);
  return absl::OkStatus();
}

absl::StatusOr<Mlp::Eval> Mlp::Evaluate(const ParamSet& params, const float* x,
                                        const int32_t* labels, int n) {
  PST_RETURN_IF_ERROR(CheckParams(params));
  if (n <= 0) return absl::InvalidArgumentError(absl::StrCat("n must be > 0, got ", n));
  if (x == nullptr) return absl::InvalidArgumentError("x is null");
  const int num_classes = config_.num_classes;
  PST_RETURN_IF_ERROR(CheckLabels(labels, n, num_classes));

  const std::vector<int>& dims = dims_;
  const size_t input_dim = static_cast<size_t>(config_.input_dim);
  int64_t correct = 0;
  double total_loss = 0;
  for (int start = 0; start < n; start += kEvalChunk) {
    const int count = std::min(kEvalChunk, n - start);
    ForwardLayers(dims, params, x + static_cast<size_t>(start) * input_dim, count, &acts_);
    const float* logits = acts_.back().data();
    for (int r = 0; r < count; ++r) {
      const float* z = logits + static_cast<size_t>(r) * num_classes;
      const int label = labels[start + r];
      total_loss += RowCrossEntropy(z, num_classes, label, nullptr);
      if (std::max_element(z, z + num_classes) - z == label) ++correct;
    }
  }
  Eval eval;
  eval.accuracy = static_cast<double>(correct) / n;
  eval.loss = total_loss / n;
  return eval;
}

}  // namespace pst::models
