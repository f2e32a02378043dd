#include "ps_server/store/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/optimizer_config.h"
#include "common/status_macros.h"

namespace pst::ps {
namespace {

class Sgd final : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}
  std::string name() const override { return "sgd"; }
  int num_slots() const override { return 0; }
  void ApplyDense(std::span<float> param, std::span<const float> grad,
                  std::span<const std::span<float>>, int64_t) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    const size_t n = param.size();
    for (size_t i = 0; i < n; ++i) p[i] -= lr_ * g[i];
  }

 private:
  const float lr_;
};

// TensorFlow's MomentumOptimizer: accum = m * accum + g, then
// var -= lr * accum, or with Nesterov var -= lr * (g + m * accum).
class Momentum final : public Optimizer {
 public:
  Momentum(float lr, float momentum, bool nesterov)
      : lr_(lr), momentum_(momentum), nesterov_(nesterov) {}
  std::string name() const override { return "momentum"; }
  int num_slots() const override { return 1; }
  void ApplyDense(std::span<float> param, std::span<const float> grad,
                  std::span<const std::span<float>> slots, int64_t) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict a = slots[0].data();
    const size_t n = param.size();
    if (nesterov_) {
      for (size_t i = 0; i < n; ++i) {
        a[i] = momentum_ * a[i] + g[i];
        p[i] -= lr_ * (g[i] + momentum_ * a[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        a[i] = momentum_ * a[i] + g[i];
        p[i] -= lr_ * a[i];
      }
    }
  }

 private:
  const float lr_;
  const float momentum_;
  const bool nesterov_;
};

// Adam (Kingma & Ba) in TensorFlow's form: m = b1 m + (1-b1) g,
// v = b2 v + (1-b2) g^2, var -= lr * sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps).
class Adam final : public Optimizer {
 public:
  Adam(float lr, float beta1, float beta2, float epsilon)
      : lr_(lr), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}
  std::string name() const override { return "adam"; }
  int num_slots() const override { return 2; }
  void ApplyDense(std::span<float> param, std::span<const float> grad,
                  std::span<const std::span<float>> slots, int64_t t) override {
    const double td = static_cast<double>(t);
    const float lr_t = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(beta2_, td)) /
                                          (1.0 - std::pow(beta1_, td)));
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict m = slots[0].data();
    float* __restrict v = slots[1].data();
    const size_t n = param.size();
    // Locals, not members: a store through p, m or v could otherwise alias
    // them, which keeps the compiler from vectorizing the loop.
    const float b1 = beta1_, b2 = beta2_, eps = epsilon_;
    for (size_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }

 private:
  const float lr_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
};

// TensorFlow's ApplyAdagrad: accum += g^2; var -= lr * g / sqrt(accum).
class Adagrad final : public Optimizer {
 public:
  Adagrad(float lr, float initial_accumulator)
      : lr_(lr), initial_accumulator_(initial_accumulator) {}
  std::string name() const override { return "adagrad"; }
  int num_slots() const override { return 1; }
  float SlotInitialValue(int) const override { return initial_accumulator_; }
  void ApplyDense(std::span<float> param, std::span<const float> grad,
                  std::span<const std::span<float>> slots, int64_t) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict a = slots[0].data();
    const size_t n = param.size();
    for (size_t i = 0; i < n; ++i) {
      a[i] += g[i] * g[i];
      p[i] -= lr_ * g[i] / std::sqrt(a[i]);
    }
  }

 private:
  const float lr_;
  const float initial_accumulator_;
};

// TensorFlow's ApplyFtrl (FTRL-Proximal), computed per element in double:
//   accum_new = accum + g^2
//   linear += g - (accum_new^(-lr_power) - accum^(-lr_power)) / lr * var
//   quadratic = accum_new^(-lr_power) / lr + 2 * l2
//   var = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
//   accum = accum_new
// Slots: 0 accum, 1 linear.
class Ftrl final : public Optimizer {
 public:
  Ftrl(float lr, float initial_accumulator, float l1, float l2, float lr_power)
      : lr_(lr), initial_accumulator_(initial_accumulator), l1_(l1), l2_(l2), lr_power_(lr_power) {}
  std::string name() const override { return "ftrl"; }
  int num_slots() const override { return 2; }
  float SlotInitialValue(int slot) const override {
    return slot == 0 ? initial_accumulator_ : 0.0f;
  }
  void ApplyDense(std::span<float> param, std::span<const float> grad,
                  std::span<const std::span<float>> slots, int64_t) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict accum = slots[0].data();
    float* __restrict linear = slots[1].data();
    const size_t n = param.size();
    const double lr = lr_, l1 = l1_, l2 = l2_, power = -static_cast<double>(lr_power_);
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
  const float lr_;
  const float initial_accumulator_;
  const float l1_;
  const float l2_;
  const float lr_power_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const proto::OptimizerConfig& config) {
  PST_ASSIGN_OR_RETURN(const proto::OptimizerConfig c, common::CheckOptimizerConfig(config));
  const float lr = c.learning_rate();
  const std::string& name = c.name();
  if (name == "sgd") return std::make_unique<Sgd>(lr);
  if (name == "momentum") return std::make_unique<Momentum>(lr, c.momentum(), c.nesterov());
  if (name == "adam") return std::make_unique<Adam>(lr, c.beta1(), c.beta2(), c.epsilon());
  if (name == "adagrad") return std::make_unique<Adagrad>(lr, c.initial_accumulator());
  return std::make_unique<Ftrl>(lr, c.initial_accumulator(), c.l1(), c.l2(), c.lr_power());
}

}  // namespace pst::ps
