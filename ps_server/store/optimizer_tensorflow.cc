// TensorFlow's forms: each rule as the kernel named (tensorflow/core/kernels/
// training_ops.cc), in float32 with its coefficients computed in double
// from the decimal hyperparameters (common/decimal.h). The loops with a
// square root or a division run in an AVX2 build where the CPU has it
// (RunWide, loop_dispatch.h: 8 floats an instruction, the same bits).
#include <cmath>
#include <memory>

#include "common/decimal.h"
#include "ps_server/store/loop_dispatch.h"
#include "ps_server/store/optimizer_rules.h"

namespace pst::ps::internal {
namespace {

using common::DecimalValue;

// ApplyGradientDescent: var -= lr * g.
class Sgd final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>>, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    const float lr = static_cast<float>(step.lr);
    const size_t n = param.size();
    for (size_t i = 0; i < n; ++i) p[i] -= lr * g[i];
  }
};

// ApplyMomentum: accum = m * accum + g, then var -= lr * accum, or with
// Nesterov var -= lr * (g + m * accum).
class Momentum final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict a = slots[0].data();
    const size_t n = param.size();
    const float lr = static_cast<float>(step.lr), m = momentum_;
    if (nesterov_) {
      for (size_t i = 0; i < n; ++i) {
        a[i] = m * a[i] + g[i];
        p[i] -= lr * (g[i] + m * a[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        a[i] = m * a[i] + g[i];
        p[i] -= lr * a[i];
      }
    }
  }

 private:
  const float momentum_ = config().momentum();
  const bool nesterov_ = config().nesterov();
};

// ApplyAdam: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
// var -= lr * sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps). AdamW (Keras's
// AdamW) first takes var -= var * weight_decay * lr.
class Adam final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  bool CoupledDecay() const override { return name() != "adamw"; }
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    const double td = static_cast<double>(step.t);
    const float lr_t = static_cast<float>(step.lr * std::sqrt(1.0 - std::pow(beta2_.exact, td)) /
                                          (1.0 - std::pow(beta1_.exact, td)));
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict m = slots[0].data();
    float* __restrict v = slots[1].data();
    const size_t n = param.size();
    // Locals, not members: a store through p, m or v could otherwise alias
    // them, which keeps the compiler from vectorizing the loop.
    const float b1 = beta1_.rate, b2 = beta2_.rate, c1 = beta1_.complement, c2 = beta2_.complement,
                eps = eps_;
    if (!CoupledDecay() && decoupled_ != 0) {
      const float wd_lr = static_cast<float>(decoupled_ * step.lr);
      for (size_t i = 0; i < n; ++i) p[i] -= p[i] * wd_lr;
    }
    RunWide<&AdamLoop>(p, g, m, v, b1, b2, c1, c2, eps, lr_t, n);
  }

 private:
  PST_LOOP void AdamLoop(float* __restrict p, const float* __restrict g, float* __restrict m,
                         float* __restrict v, float b1, float b2, float c1, float c2, float eps,
                         float lr_t, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + c1 * g[i];
      v[i] = b2 * v[i] + c2 * g[i] * g[i];
      p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }

  const Decay beta1_{config().beta1()};
  const Decay beta2_{config().beta2()};
  const float eps_ = config().epsilon();
  const double decoupled_ = DecimalValue(config().weight_decay());
};

// ApplyAdagrad: accum += g^2; var -= lr * g / sqrt(accum) (TF1), or with
// an epsilon (Keras's Adagrad) var -= lr * g / (sqrt(accum) + eps); the
// rate decays as lr / (1 + (t - 1) * lr_decay) when asked.
class Adagrad final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict a = slots[0].data();
    const size_t n = param.size();
    const float lr = static_cast<float>(step.lr / (1 + static_cast<double>(step.t - 1) * decay_));
    RunWide<&AdagradLoop>(p, g, a, lr, eps_, n);
  }

 private:
  PST_LOOP void AdagradLoop(float* __restrict p, const float* __restrict g, float* __restrict a,
                            float lr, float eps, size_t n) {
    if (eps == 0) {
      for (size_t i = 0; i < n; ++i) {
        a[i] += g[i] * g[i];
        p[i] -= lr * g[i] / std::sqrt(a[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        a[i] += g[i] * g[i];
        p[i] -= lr * g[i] / (std::sqrt(a[i]) + eps);
      }
    }
  }

  const double decay_ = DecimalValue(config().lr_decay());
  const float eps_ = config().epsilon();
};

// ApplyRMSProp: ms += (g^2 - ms) * (1 - rho);
// mom = mom * momentum + lr * g / sqrt(ms + eps); var -= mom.
// ApplyCenteredRMSProp: also mg += (g - mg) * (1 - rho), and
// mom = mom * momentum + lr * g / sqrt(ms - mg^2 + eps).
// Slots: ms (from initial_accumulator: TF1's RMSPropOptimizer starts it at
// 1, Keras at 0), mom, mg.
class RmsProp final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict ms = slots[0].data();
    float* __restrict mom = slots[1].data();
    const size_t n = param.size();
    const float lr = static_cast<float>(step.lr);
    float* mg = centered_ ? slots[2].data() : nullptr;
    RunWide<&RmsPropLoop>(p, g, ms, mom, mg, lr, c_, momentum_, eps_, n);
  }

 private:
  // Centered where `mg` is given.
  PST_LOOP void RmsPropLoop(float* __restrict p, const float* __restrict g, float* __restrict ms,
                            float* __restrict mom, float* __restrict mg, float lr, float c, float m,
                            float eps, size_t n) {
    if (mg != nullptr) {
      for (size_t i = 0; i < n; ++i) {
        ms[i] += (g[i] * g[i] - ms[i]) * c;
        mg[i] += (g[i] - mg[i]) * c;
        mom[i] = mom[i] * m + (g[i] * lr) / std::sqrt((ms[i] - mg[i] * mg[i]) + eps);
        p[i] -= mom[i];
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        ms[i] += (g[i] * g[i] - ms[i]) * c;
        mom[i] = mom[i] * m + (g[i] * lr) / std::sqrt(ms[i] + eps);
        p[i] -= mom[i];
      }
    }
  }

  const float c_ = Decay(config().rho()).complement;
  const float momentum_ = config().momentum();
  const float eps_ = config().epsilon();
  const bool centered_ = config().centered();
};

// ApplyAdadelta: accum = accum * rho + g^2 * (1 - rho);
// update = sqrt(accum_update + eps) * rsqrt(accum + eps) * g;
// var -= update * lr; accum_update = accum_update * rho + update^2 * (1 - rho).
class Adadelta final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict accum = slots[0].data();
    float* __restrict update_accum = slots[1].data();
    const size_t n = param.size();
    RunWide<&AdadeltaLoop>(p, g, accum, update_accum, static_cast<float>(step.lr), rho_.rate,
                           rho_.complement, eps_, n);
  }

 private:
  PST_LOOP void AdadeltaLoop(float* __restrict p, const float* __restrict g,
                             float* __restrict accum, float* __restrict update_accum, float lr,
                             float rho, float c, float eps, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      accum[i] = accum[i] * rho + g[i] * g[i] * c;
      const float update =
          std::sqrt(update_accum[i] + eps) * (1.0f / std::sqrt(accum[i] + eps)) * g[i];
      p[i] -= update * lr;
      update_accum[i] = update_accum[i] * rho + update * update * c;
    }
  }

  const Decay rho_{config().rho()};
  const float eps_ = config().epsilon();
};

// ApplyFtrl (FTRL-Proximal), computed per element in double:
//   accum_new = accum + g^2
//   linear += g - (accum_new^(-lr_power) - accum^(-lr_power)) / lr * var
//   quadratic = accum_new^(-lr_power) / lr + 2 * l2
//   var = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
//   accum = accum_new
// Slots: 0 accum, 1 linear. lr_power is taken as given: 0 is a fixed rate.
class Ftrl final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict accum = slots[0].data();
    float* __restrict linear = slots[1].data();
    const size_t n = param.size();
    const double lr = step.lr, l1 = l1_, l2 = l2_, power = -static_cast<double>(lr_power_);
    const bool half = lr_power_ == -0.5f;
    auto pow_acc = [&](double a) { return half ? std::sqrt(a) : std::pow(a, power); };
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i];
      const double a_old = accum[i];
      const double a_new = a_old + gi * gi;
      const double pow_new = pow_acc(a_new);
      const double lin = linear[i] + gi - (pow_new - pow_acc(a_old)) / lr * p[i];
      const double quadratic = pow_new / lr + 2 * l2;
      p[i] = std::abs(lin) > l1 ? static_cast<float>((std::copysign(l1, lin) - lin) / quadratic)
                                : 0.0f;
      linear[i] = static_cast<float>(lin);
      accum[i] = static_cast<float>(a_new);
    }
  }

 private:
  const float l1_ = config().l1();
  const float l2_ = config().l2();
  const float lr_power_ = config().lr_power();
};

}  // namespace

std::unique_ptr<Optimizer> CreateTensorflowOptimizer(const proto::OptimizerConfig& c) {
  const std::string& name = c.name();
  if (name == "sgd") return std::make_unique<Sgd>(c);
  if (name == "momentum") return std::make_unique<Momentum>(c);
  if (name == "adam" || name == "adamw") return std::make_unique<Adam>(c);
  if (name == "adagrad") return std::make_unique<Adagrad>(c);
  if (name == "rmsprop") return std::make_unique<RmsProp>(c);
  if (name == "adadelta") return std::make_unique<Adadelta>(c);
  return std::make_unique<Ftrl>(c);
}

}  // namespace pst::ps::internal
