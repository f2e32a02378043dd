#include "common/optimizer_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace pst::common {

absl::StatusOr<proto::OptimizerConfig> CheckOptimizerConfig(const proto::OptimizerConfig& config) {
  proto::OptimizerConfig checked = config;
  const float lr = config.learning_rate();
  if (!std::isfinite(lr) || lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer learning_rate must be positive and finite, got ", lr));
  }
  const std::string& name = config.name();
  if (name == "sgd") return checked;
  if (name == "momentum") {
    const float m = config.momentum();
    if (!(m >= 0 && m < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("momentum must be in [0, 1), got ", m));
    }
    return checked;
  }
  if (name == "adam") {
    const float b1 = config.beta1(), b2 = config.beta2(), eps = config.epsilon();
    if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("adam betas must be in [0, 1), got beta1 ", b1, ", beta2 ", b2));
    }
    if (!(eps > 0) || !std::isfinite(eps)) {
      return absl::InvalidArgumentError(absl::StrCat("adam epsilon must be positive, got ", eps));
    }
    return checked;
  }
  if (name == "adagrad" || name == "ftrl") {
    const float init = config.initial_accumulator();
    if (!std::isfinite(init) || init < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " initial_accumulator must be positive and finite (0: default ",
                       kDefaultInitialAccumulator, "), got ", init));
    }
    if (init == 0) checked.set_initial_accumulator(kDefaultInitialAccumulator);
    if (name == "adagrad") return checked;
    const float l1 = config.l1(), l2 = config.l2(), lr_power = config.lr_power();
    if (!std::isfinite(l1) || l1 < 0) {
      return absl::InvalidArgumentError(absl::StrCat("ftrl l1 must be >= 0 and finite, got ", l1));
    }
    if (!std::isfinite(l2) || l2 < 0) {
      return absl::InvalidArgumentError(absl::StrCat("ftrl l2 must be >= 0 and finite, got ", l2));
    }
    if (!std::isfinite(lr_power) || lr_power > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ftrl lr_power must be <= 0 and finite (TensorFlow's default: -0.5), got ", lr_power));
    }
    return checked;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (known: sgd, momentum, adam, adagrad, ftrl)"));
}

}  // namespace pst::common
