#include "common/optimizer_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"

namespace pst::common {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

bool Finite(float f) { return std::isfinite(f); }

// The form's default for a field left 0.
float EpsilonDefault(const std::string& name, bool torch) {
  if (name == "adagrad") return torch ? 1e-10f : 0.0f;  // TF1's ApplyAdagrad has none
  if (name == "adadelta") return torch ? 1e-6f : 1e-7f;
  return torch ? 1e-8f : 1e-7f;  // adam, adamw, rmsprop
}

}  // namespace

absl::StatusOr<proto::OptimizerConfig> CheckOptimizerConfig(const proto::OptimizerConfig& config) {
  proto::OptimizerConfig c = config;
  const std::string& name = c.name();
  const bool known = name == "sgd" || name == "momentum" || name == "adam" || name == "adamw" ||
                     name == "adagrad" || name == "rmsprop" || name == "adadelta" || name == "ftrl";
  if (!known) {
    return Bad(absl::StrCat("unknown optimizer '", name, "' (known: ", kOptimizerNames, ")"));
  }
  if (c.form().empty()) c.set_form(std::string(kTensorflowForm));
  if (c.form() != kTensorflowForm && c.form() != kTorchForm) {
    return Bad(absl::StrCat("unknown optimizer form '", c.form(), "' (known: ", kTensorflowForm,
                            ", ", kTorchForm, ")"));
  }
  const bool torch = c.form() == kTorchForm;
  if (torch && name == "ftrl") {
    return Bad("optimizer ftrl has no torch form (torch.optim has no FTRL): use form tensorflow");
  }
  const float lr = c.learning_rate();
  if (!Finite(lr) || lr <= 0) {
    return Bad(absl::StrCat("optimizer learning_rate must be positive and finite, got ", lr));
  }
  if (!Finite(c.weight_decay()) || c.weight_decay() < 0) {
    return Bad(
        absl::StrCat("optimizer weight_decay must be >= 0 and finite, got ", c.weight_decay()));
  }
  if (name == "ftrl" && c.weight_decay() != 0) {
    return Bad("optimizer weight_decay does not apply to ftrl (its l2 is the decay)");
  }
  if (!Finite(c.clip_value()) || c.clip_value() < 0) {
    return Bad(absl::StrCat("optimizer clip_value must be >= 0 and finite (0: no clipping), got ",
                            c.clip_value()));
  }
  if (!Finite(c.lr_decay()) || c.lr_decay() < 0) {
    return Bad(absl::StrCat("optimizer lr_decay must be >= 0 and finite, got ", c.lr_decay()));
  }
  if (c.lr_decay() != 0 && name != "adagrad") {
    return Bad(absl::StrCat("optimizer lr_decay applies to adagrad only, not ", name));
  }
  if (c.centered() && name != "rmsprop") {
    return Bad(absl::StrCat("optimizer centered applies to rmsprop only, not ", name));
  }
  if (absl::Status s = CheckLrSchedule(c.schedule()); !s.ok()) return s;

  if (name == "momentum" || name == "rmsprop") {
    const float m = c.momentum();
    if (!(m >= 0 && m < 1)) {
      return Bad(absl::StrCat(name, " momentum must be in [0, 1), got ", m));
    }
  }
  if (name == "adam" || name == "adamw") {
    const float b1 = c.beta1(), b2 = c.beta2();
    if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
      return Bad(absl::StrCat(name, " betas must be in [0, 1), got beta1 ", b1, ", beta2 ", b2));
    }
  }
  if (name == "rmsprop" || name == "adadelta") {
    if (c.rho() == 0) c.set_rho(name == "rmsprop" && torch ? 0.99f : 0.9f);
    if (!(c.rho() > 0 && c.rho() < 1)) {
      return Bad(absl::StrCat(name, " rho must be in (0, 1) (0: default), got ", c.rho()));
    }
  }
  if (name != "sgd" && name != "momentum" && name != "ftrl") {
    if (c.epsilon() == 0) c.set_epsilon(EpsilonDefault(name, torch));
    if (!Finite(c.epsilon()) || c.epsilon() < 0 ||
        (c.epsilon() == 0 && !(name == "adagrad" && !torch))) {
      return Bad(absl::StrCat(name, " epsilon must be positive and finite (0: the ", c.form(),
                              " default), got ", c.epsilon()));
    }
  }
  if (name == "adagrad" || name == "ftrl" || name == "rmsprop") {
    const float init = c.initial_accumulator();
    if (!Finite(init) || init < 0) {
      return Bad(absl::StrCat(name, " initial_accumulator must be >= 0 and finite (0: the ",
                              c.form(), " default), got ", init));
    }
    if (init == 0 && name != "rmsprop" && !torch) {
      c.set_initial_accumulator(kDefaultInitialAccumulator);
    }
  }
  if (name == "ftrl") {
    const float l1 = c.l1(), l2 = c.l2(), lr_power = c.lr_power();
    if (!Finite(l1) || l1 < 0)
      return Bad(absl::StrCat("ftrl l1 must be >= 0 and finite, got ", l1));
    if (!Finite(l2) || l2 < 0)
      return Bad(absl::StrCat("ftrl l2 must be >= 0 and finite, got ", l2));
    if (!Finite(lr_power) || lr_power > 0) {
      return Bad(absl::StrCat(
          "ftrl lr_power must be <= 0 and finite (TensorFlow's default: -0.5), got ", lr_power));
    }
  }
  return c;
}

std::vector<std::string> OptimizerSlotNames(const proto::OptimizerConfig& config) {
  const std::string& name = config.name();
  if (name == "momentum" || name == "adagrad") return {"accum"};
  if (name == "adam" || name == "adamw") return {"m", "v"};
  if (name == "adadelta") return {"accum", "accum_update"};
  if (name == "ftrl") return {"accum", "linear"};
  if (name == "rmsprop") {
    std::vector<std::string> slots = {"ms"};
    if (OptimizerForm(config) != kTorchForm || config.momentum() > 0) slots.push_back("mom");
    if (config.centered()) slots.push_back("mg");
    return slots;
  }
  return {};
}

}  // namespace pst::common
