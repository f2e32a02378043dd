// The optimizer settings of a job (proto::OptimizerConfig), checked where
// they are given (the flags, at start) and where they are used (the ps,
// which builds the optimizer: ps_server/store/optimizer.h), by the same rules.
//
// Thread-safety: pure functions.
#ifndef PST_COMMON_OPTIMIZER_CONFIG_H_
#define PST_COMMON_OPTIMIZER_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

inline constexpr absl::string_view kOptimizerNames =
    "sgd, momentum, adam, adamw, adagrad, rmsprop, adadelta, ftrl";
// The update rules an optimizer can follow (OptimizerConfig.form).
inline constexpr absl::string_view kTensorflowForm = "tensorflow";
inline constexpr absl::string_view kTorchForm = "torch";

// The form `config` names: its form, or "tensorflow" when empty (the
// default, as CheckOptimizerConfig fills it in).
inline absl::string_view OptimizerForm(const proto::OptimizerConfig& config) {
  return config.form().empty() ? kTensorflowForm : absl::string_view(config.form());
}

// The accumulator start value Adagrad and FTRL use in TensorFlow's form when
// the config's initial_accumulator is 0 (unset), as TensorFlow's default.
inline constexpr float kDefaultInitialAccumulator = 0.1f;

// `config` checked, with the defaults of its form filled in: form
// "tensorflow" when empty; epsilon 0 as the form's (adam, adamw, rmsprop:
// TF 1e-7, torch 1e-8; adadelta: TF 1e-7, torch 1e-6; adagrad: torch
// 1e-10, TF none); rho 0 as 0.9 (torch's rmsprop: 0.99); initial_accumulator
// 0 as 0.1 for TF's adagrad and ftrl. Errors: InvalidArgument naming the
// field: an unknown name or form, ftrl in torch's form, a learning rate
// that is not positive and finite, momentum or betas outside [0, 1), rho
// outside (0, 1), a negative or non-finite epsilon, weight_decay,
// clip_value, lr_decay or initial accumulator, weight_decay for ftrl,
// lr_decay but for adagrad, centered but for rmsprop, FTRL l1 or l2 below
// 0, an FTRL lr_power above 0, or a schedule CheckLrSchedule refuses.
absl::StatusOr<proto::OptimizerConfig> CheckOptimizerConfig(const proto::OptimizerConfig& config);

// The slots the optimizer keeps per element, in the order the ps keeps them
// (in checkpoints, and as <variable>/<slot> in an export):
//   sgd: none            momentum: accum         adam, adamw: m, v
//   adagrad: accum       adadelta: accum, accum_update
//   ftrl: accum, linear
//   rmsprop: ms; then mom (TensorFlow's form always, torch's when momentum
//            > 0); then mg when centered
// Reads only the name, form, momentum and centered (an empty form is
// TensorFlow's), so it names the slots of a config as a checkpoint's
// manifest holds it; none for an unknown name.
std::vector<std::string> OptimizerSlotNames(const proto::OptimizerConfig& config);

}  // namespace pst::common

#endif  // PST_COMMON_OPTIMIZER_CONFIG_H_
