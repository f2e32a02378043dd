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
                  std::span<const std::span<float>>) override {
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
                  std::span<const std::span<float>> slots) override {
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
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", config.name(), "' (known: sgd, momentum)"));
}

}  // namespace pst::ps
