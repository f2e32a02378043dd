// Optimizers run on the ps: each push applies its gradient to the variable
// in place. An Optimizer is stateless apart from its hyperparameters; slot
// variables (momentum, accumulators) belong to the variable they serve.
//
// Every optimizer here is elementwise: element i of the update depends only
// on element i of the parameter, the gradient and the slots. A sparse update
// (some rows of a variable) is therefore ApplyDense on each touched row's
// span of the parameter and of each slot; untouched rows and their slots
// stay as they are (TensorFlow's sparse apply ops, "lazy" for Adam).
//
// Thread-safety: ApplyDense may be called concurrently on spans that do not
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

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  virtual std::string name() const = 0;
  // Slot vectors, each the size of the variable, that ApplyDense receives.
  virtual int num_slots() const = 0;
  // The value every element of slot `slot` starts at (Adagrad's and FTRL's
  // accumulators start at initial_accumulator; everything else at 0).
  // REQUIRES: 0 <= slot < num_slots().
  virtual float SlotInitialValue(int slot) const { return 0.0f; }

  // param -= update(grad). `t` is the 1-based count of updates applied to
  // this variable, this one included (Adam's bias correction uses it).
  // REQUIRES: grad.size() == param.size(), every slot the same size too;
  // t >= 1.
  virtual void ApplyDense(std::span<float> param, std::span<const float> grad,
                          std::span<const std::span<float>> slots, int64_t t) = 0;
};

using common::kDefaultInitialAccumulator;

// Builds the optimizer `config.name` names:
//   sgd:      var -= lr * g
//   momentum: accum = m * accum + g; var -= lr * accum
//             (nesterov: var -= lr * (g + m * accum))
//   adam:     TensorFlow's Adam with bias correction from t
//   adagrad:  accum += g^2; var -= lr * g / sqrt(accum)
//             (slot: accum, starting at initial_accumulator)
//   ftrl:     TensorFlow's ApplyFtrl (FTRL-Proximal, McMahan et al.) with l1,
//             l2 and lr_power (slots: accum from initial_accumulator, linear
//             from 0). lr_power is taken as given: 0 is a fixed learning rate.
// initial_accumulator 0 means kDefaultInitialAccumulator.
// Errors: as common::CheckOptimizerConfig, which checks `config` first.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const proto::OptimizerConfig& config);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_OPTIMIZER_H_
