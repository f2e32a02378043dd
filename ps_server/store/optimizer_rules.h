// The optimizers of each form, for CreateOptimizer (optimizer.cc) only.
#ifndef PST_PS_SERVER_STORE_OPTIMIZER_RULES_H_
#define PST_PS_SERVER_STORE_OPTIMIZER_RULES_H_

#include <memory>

#include "proto/pstrain.pb.h"
#include "ps_server/store/optimizer.h"

namespace pst::ps::internal {

// TensorFlow's kernels (training_ops): every optimizer. REQUIRES: `checked`
// passed common::CheckOptimizerConfig with form "tensorflow".
std::unique_ptr<Optimizer> CreateTensorflowOptimizer(const proto::OptimizerConfig& checked);

// torch.optim's single-tensor rules: every optimizer but ftrl. REQUIRES:
// `checked` passed common::CheckOptimizerConfig with form "torch".
std::unique_ptr<Optimizer> CreateTorchOptimizer(const proto::OptimizerConfig& checked);

}  // namespace pst::ps::internal

#endif  // PST_PS_SERVER_STORE_OPTIMIZER_RULES_H_
