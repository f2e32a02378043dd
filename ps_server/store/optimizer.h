// Optimizers run on the ps: each push applies its gradient to the variable
// in place. An Optimizer is stateless apart from its settings; slot
// variables (momentum, accumulators) belong to the variable they serve.
//
// Every optimizer here is elementwise: element i of the update depends only
// on element i of the parameter, the gradient and the slots. A sparse update
// (some rows of a variable) is therefore Apply on each touched row's span of
// the parameter and of each slot; untouched rows and their slots stay as
// they are ("lazy": TensorFlow's sparse apply ops, torch's SparseAdam and
// sparse Adagrad). The step count t (Adam's bias correction, Adagrad's
// lr_decay, the schedule) is the variable's, not the row's.
//
// Each rule follows a named reference exactly, in one of two forms
// (OptimizerConfig.form): TensorFlow's kernels (optimizer_tensorflow.cc) or
// torch.optim's single-tensor code (optimizer_torch.cc), down to the order
// of the float32 operations, so that the ps and the reference agree to
// float32 rounding.
//
// Thread-safety: Apply may be called concurrently on spans that do not
// overlap (different variables, or different rows of one variable); the
// caller holds the lock that guards the spans.
#ifndef PST_PS_SERVER_STORE_OPTIMIZER_H_
#define PST_PS_SERVER_STORE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "common/optimizer_config.h"
#include "proto/pstrain.pb.h"

namespace pst::ps {

// One update of a variable.
struct Step {
  int64_t t = 1;  // 1-based count of updates to the variable, this one included
  double lr = 0;  // the learning rate of this update: the schedule at t - 1
};

class Optimizer {
 public:
  // REQUIRES: `checked` passed common::CheckOptimizerConfig.
  explicit Optimizer(proto::OptimizerConfig checked);
  virtual ~Optimizer() = default;

  const std::string& name() const { return config_.name(); }
  // The checked settings, defaults filled in.
  const proto::OptimizerConfig& config() const { return config_; }
  // Slot vectors, each the size of the variable, that Apply receives, in
  // the order common::OptimizerSlotNames names them.
  int num_slots() const { return num_slots_; }
  // The value every element of slot `slot` starts at (accumulators start at
  // initial_accumulator; everything else at 0).
  // REQUIRES: 0 <= slot < num_slots().
  float SlotInitialValue(int slot) const;

  // The update after t - 1 others: its learning rate from the schedule.
  // REQUIRES: t >= 1.
  Step StepAt(int64_t t) const;

  // param -= update(grad), the gradient first clipped to clip_value and
  // given the coupled weight decay (grad += weight_decay * param) where the
  // config asks for them.
  // REQUIRES: grad.size() == param.size(), every slot the same size too.
  void Apply(std::span<float> param, std::span<const float> grad,
             std::span<const std::span<float>> slots, const Step& step);

 protected:
  // The rule itself, on a gradient already clipped and decayed.
  virtual void ApplyRule(std::span<float> param, std::span<const float> grad,
                         std::span<const std::span<float>> slots, const Step& step) = 0;
  // False for a rule that decays the parameter itself (AdamW).
  virtual bool CoupledDecay() const { return true; }

 private:
  const proto::OptimizerConfig config_;
  // The learning rate as the decimal it was written as (common/decimal.h),
  // once: StepAt runs at every push.
  const double base_rate_;
  const int num_slots_;
  const float clip_;
  const float decay_;
};

using common::kDefaultInitialAccumulator;

// Builds the optimizer `config.name` names, in `config.form`:
//   sgd, momentum:  var -= lr * g; momentum accum = m * accum + g (nesterov too)
//   adam, adamw:    Kingma & Ba with bias correction from t; adamw decays
//                   the parameter by lr * weight_decay first (Loshchilov & Hutter)
//   adagrad:        accum += g^2; var -= lr' * g / (sqrt(accum) + eps),
//                   lr' = lr / (1 + (t - 1) * lr_decay)
//   rmsprop:        mean square (and mean, centered) with decay rho, momentum
//   adadelta:       Zeiler's, with decay rho
//   ftrl:           TensorFlow's ApplyFtrl (FTRL-Proximal, McMahan et al.)
// optimizer_tensorflow.cc and optimizer_torch.cc give each exact rule.
// Errors: as common::CheckOptimizerConfig, which checks `config` first.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const proto::OptimizerConfig& config);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_OPTIMIZER_H_
