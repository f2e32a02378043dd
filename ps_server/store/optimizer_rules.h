// The optimizers of each form, for CreateOptimizer (optimizer.cc) only.
#ifndef PST_PS_SERVER_STORE_OPTIMIZER_RULES_H_
#define PST_PS_SERVER_STORE_OPTIMIZER_RULES_H_

#include <cstddef>
#include <memory>

#include "common/decimal.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/optimizer.h"

namespace pst::ps::internal {

// A decay rate (Adam's betas, RMSProp's and Adadelta's rho) as both forms'
// kernels take it: the decimal it was written as (common/decimal.h), and
// the rate and 1 - rate each computed in double and rounded to float32,
// as torch and TensorFlow compute them.
struct Decay {
  explicit Decay(float written)
      : exact(common::DecimalValue(written)),
        rate(static_cast<float>(exact)),
        complement(static_cast<float>(1 - exact)) {}
  double exact;
  float rate;
  float complement;
};

// TensorFlow's kernels (training_ops): every optimizer. REQUIRES: `checked`
// passed common::CheckOptimizerConfig with form "tensorflow".
std::unique_ptr<Optimizer> CreateTensorflowOptimizer(const proto::OptimizerConfig& checked);

// torch.optim's single-tensor rules: every optimizer but ftrl. REQUIRES:
// `checked` passed common::CheckOptimizerConfig with form "torch".
std::unique_ptr<Optimizer> CreateTorchOptimizer(const proto::OptimizerConfig& checked);

// grad[i] = fma(decay, param[i], grad[i]) for i < n: torch's coupled weight
// decay, grad.add(param, alpha=decay), fused as ATen fuses it (every form
// takes it so; optimizer_torch.cc).
void AddCoupledDecay(float* grad, const float* param, float decay, size_t n);

}  // namespace pst::ps::internal

#endif  // PST_PS_SERVER_STORE_OPTIMIZER_RULES_H_
