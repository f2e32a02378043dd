#include "ps_server/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

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
    for (size_t i = 0; i < n; ++i) {
      m[i] = beta1_ * m[i] + (1 - beta1_) * g[i];
      v[i] = beta2_ * v[i] + (1 - beta2_) * g[i] * g[i];
      p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + epsilon_);
    }
  }

 private:
  const float lr_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const proto::OptimizerConfig& config) {
  const float lr = config.learning_rate();
  if (!std::isfinite(lr) || lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer learning_rate must be positive and finite, got ", lr));
  }
  if (config.name() == "sgd") return std::make_unique<Sgd>(lr);
  if (config.name() == "momentum") {
    const float m = config.momentum();
    if (!(m >= 0 && m < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("momentum must be in [0, 1), got ", m));
    }
    return std::make_unique<Momentum>(lr, m, config.nesterov());
  }
  if (config.name() == "adam") {
    const float b1 = config.beta1(), b2 = config.beta2(), eps = config.epsilon();
    if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("adam betas must be in [0, 1), got beta1 ", b1, ", beta2 ", b2));
    }
    if (!(eps > 0) || !std::isfinite(eps)) {
      return absl::InvalidArgumentError(absl::StrCat("adam epsilon must be positive, got ", eps));
    }
    return std::make_unique<Adam>(lr, b1, b2, eps);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", config.name(), "' (known: sgd, momentum, adam)"));
}

}  // namespace pst::ps
