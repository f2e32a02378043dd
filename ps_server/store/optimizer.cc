#include "ps_server/store/optimizer.h"

#include <algorithm>
#include <vector>

#include "common/decimal.h"
#include "common/lr_schedule.h"
#include "common/optimizer_config.h"
#include "common/status_macros.h"
#include "ps_server/store/optimizer_rules.h"

namespace pst::ps {

Optimizer::Optimizer(proto::OptimizerConfig checked)
    : config_(std::move(checked)),
      base_rate_(common::DecimalValue(config_.learning_rate())),
      num_slots_(static_cast<int>(common::OptimizerSlotNames(config_).size())),
      clip_(config_.clip_value()),
      decay_(config_.weight_decay()) {}

float Optimizer::SlotInitialValue(int slot) const {
  const std::string& n = config_.name();
  const bool accumulator = slot == 0 && (n == "adagrad" || n == "ftrl" || n == "rmsprop");
  return accumulator ? config_.initial_accumulator() : 0.0f;
}

Step Optimizer::StepAt(int64_t t) const {
  return {t, common::LearningRateAt(base_rate_, config_.schedule(), t - 1)};
}

void Optimizer::Apply(std::span<float> param, std::span<const float> grad,
                      std::span<const std::span<float>> slots, const Step& step) {
  const bool decay = decay_ != 0 && CoupledDecay();
  if (clip_ == 0 && !decay) {
    ApplyRule(param, grad, slots, step);
    return;
  }
  // The gradient as torch's optimizers see it: clipped first (as
  // clip_grad_value_ before optimizer.step()), then grad + decay * param.
  thread_local std::vector<float> scratch;
  scratch.resize(grad.size());
  float* __restrict g = scratch.data();
  const float* __restrict in = grad.data();
  const float* __restrict p = param.data();
  const size_t n = grad.size();
  if (clip_ != 0) {
    const float c = clip_;
    for (size_t i = 0; i < n; ++i) g[i] = std::min(std::max(in[i], -c), c);
  } else {
    std::copy_n(in, n, g);
  }
  if (decay) internal::AddCoupledDecay(g, p, decay_, n);
  ApplyRule(param, std::span<const float>(g, n), slots, step);
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const proto::OptimizerConfig& config) {
  PST_ASSIGN_OR_RETURN(const proto::OptimizerConfig c, common::CheckOptimizerConfig(config));
  if (c.form() == common::kTorchForm) return internal::CreateTorchOptimizer(c);
  return internal::CreateTensorflowOptimizer(c);
}

}  // namespace pst::ps
