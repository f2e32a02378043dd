// A multi-layer perceptron with ReLU hidden layers and a softmax
// cross-entropy head, computed on the CPU with OpenBLAS (the reference
// implementation every other device is checked against).
//
// Parameters are named and shaped as TensorFlow's Dense layers would be:
//   dense_0/kernel [in, h0], dense_0/bias [h0], dense_1/kernel [h0, h1], ...,
//   dense_L/kernel [h_{L-1}, classes], dense_L/bias [classes].
// They are passed as one flat row-major float vector per parameter, in the
// order MlpParamSpecs returns.
//
// A step allocates nothing once its buffers have grown to the batch; each
// layer's bias and ReLU are applied in one pass over the GEMM's result, and
// a ReLU's gradient in one pass with the bias gradient's column sums.
//
// Thread-safety: an Mlp holds scratch buffers; use one per thread.
#ifndef PST_MODELS_MLP_H_
#define PST_MODELS_MLP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pst::models {

struct MlpConfig {
  int input_dim = 784;
  std::vector<int> hidden = {256, 128};
  int num_classes = 10;
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool is_kernel = false;  // kernels get Glorot-uniform init, biases zeros
  int fan_in = 0;
  int fan_out = 0;
};

// One flat vector per parameter, in MlpParamSpecs order.
using ParamSet = std::vector<std::vector<float>>;

std::vector<ParamSpec> MlpParamSpecs(const MlpConfig& config);

// Appends the kernel and bias of each dense layer between consecutive widths
// in `dims`: "<prefix>dense_<i>/kernel" [dims[i], dims[i+1]] and
// "<prefix>dense_<i>/bias" [dims[i+1]].
void AppendDenseLayerSpecs(const std::vector<int>& dims, const std::string& prefix,
                           std::vector<ParamSpec>* specs);

// Checks that `params` has one vector per spec, each with the spec's number
// of elements. InvalidArgument names the first mismatch.
absl::Status CheckParamSizes(const std::vector<ParamSpec>& specs, const ParamSet& params);

class Mlp {
 public:
  explicit Mlp(MlpConfig config);

  const MlpConfig& config() const { return config_; }

  // Forward and backward pass over `batch` examples. `x` is [batch,
  // input_dim] row-major, `labels` holds class ids. Returns the mean
  // cross-entropy over the batch and fills `grads` (resized to match
  // `params`) with the gradient of that mean.
  // Errors: InvalidArgument if params do not match the specs, batch <= 0, or
  // a label is outside [0, num_classes).
  absl::StatusOr<float> LossAndGradients(const ParamSet& params, const float* x,
                                         const int32_t* labels, int batch, ParamSet* grads);

  // Forward pass only. Fills `logits` with [batch, num_classes].
  absl::Status Forward(const ParamSet& params, const float* x, int batch,
                       std::vector<float>* logits);

  // Accuracy and mean loss over `n` examples, evaluated in chunks.
  struct Eval {
    double accuracy = 0;
    double loss = 0;
  };
  absl::StatusOr<Eval> Evaluate(const ParamSet& params, const float* x, const int32_t* labels,
                                int n);

 private:
  absl::Status CheckParams(const ParamSet& params) const;

  MlpConfig config_;
  std::vector<ParamSpec> specs_;
  std::vector<int> dims_;  // input_dim, the hidden widths, num_classes
  // Scratch: activations per layer (post-ReLU), and their gradients.
  std::vector<std::vector<float>> acts_;
  std::vector<std::vector<float>> dacts_;
};

}  // namespace pst::models

#endif  // PST_MODELS_MLP_H_
