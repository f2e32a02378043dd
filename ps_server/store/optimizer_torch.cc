// torch.optim's forms (PyTorch 1.13, the single-tensor code each optimizer
// runs on CPU by default): the same float32 operations in the same order,
// with the scalars torch computes in Python (bias corrections, step sizes)
// computed in double from the decimal hyperparameters (common/decimal.h)
// and rounded to float32 where torch hands them to a kernel, so that the
// ps's values are torch's, bit for bit, on x86-64. ATen's CPU kernels fuse
// some multiply-adds and not others, and so does this file:
//   x.add_(y, alpha=a)          fma(a, y, x)
//   x.addcmul_(y, z, value=v)   fma(v * y, z, x)
//   x.addcdiv_(y, z, value=v)   x + (v * y) / z       (no fusion)
//   x.mul_(s), x / s, x.add(s)  one rounding each, s as float32
// std::fma is exact everywhere; each loop is built twice (RunFused,
// loop_dispatch.h), with the FMA instruction where the CPU has it and
// libm's fma elsewhere. The file is built with -ffp-contract=off: only the
// explicit std::fma fuse.
// The coupled weight decay (grad.add(param, alpha=weight_decay)) and
// clipping happen in Optimizer::Apply, before these rules.
#include <cmath>
#include <memory>

#include "common/decimal.h"
#include "ps_server/store/loop_dispatch.h"
#include "ps_server/store/optimizer_rules.h"

namespace pst::ps::internal {
namespace {

using common::DecimalValue;

// torch.optim.SGD without momentum: param.add_(grad, alpha=-lr).
class Sgd final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>>, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    const float neg_lr = static_cast<float>(-step.lr);
    const size_t n = param.size();
    RunFused<&SgdLoop>(p, g, neg_lr, n);
  }

 private:
  PST_LOOP void SgdLoop(float* __restrict p, const float* __restrict g, float neg_lr, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = std::fma(neg_lr, g[i], p[i]);
  }
};

// torch.optim.SGD with momentum (dampening 0): buf.mul_(m).add_(g) (the
// first step's buf = g is this from buf = 0); nesterov: d = g.add(buf,
// alpha=m), else d = buf; param.add_(d, alpha=-lr).
class Momentum final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict buf = slots[0].data();
    const size_t n = param.size();
    RunFused<&MomentumLoop>(p, g, buf, static_cast<float>(-step.lr), momentum_, nesterov_, n);
  }

 private:
  PST_LOOP void MomentumLoop(float* __restrict p, const float* __restrict g, float* __restrict buf,
                             float neg_lr, float m, bool nesterov, size_t n) {
    if (nesterov) {
      for (size_t i = 0; i < n; ++i) {
        buf[i] = buf[i] * m + g[i];
        p[i] = std::fma(neg_lr, std::fma(m, buf[i], g[i]), p[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        buf[i] = buf[i] * m + g[i];
        p[i] = std::fma(neg_lr, buf[i], p[i]);
      }
    }
  }

  const float momentum_ = config().momentum();
  const bool nesterov_ = config().nesterov();
};

// torch.optim.Adam and AdamW (amsgrad off):
//   (AdamW: param.mul_(1 - lr * weight_decay))
//   m.mul_(b1).add_(g, alpha=1 - b1);  v.mul_(b2).addcmul_(g, g, value=1 - b2)
//   denom = (v.sqrt() / sqrt(1 - b2^t)).add_(eps)
//   param.addcdiv_(m, denom, value=-lr / (1 - b1^t))
class Adam final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  bool CoupledDecay() const override { return name() != "adamw"; }
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    const double td = static_cast<double>(step.t);
    const double bias1 = 1 - std::pow(beta1_.exact, td);
    const float neg_step_size = static_cast<float>(-(step.lr / bias1));
    const float bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2_.exact, td)));
    const float keep =
        !CoupledDecay() && decoupled_ != 0 ? static_cast<float>(1 - step.lr * decoupled_) : 1.0f;
    RunFused<&AdamLoop>(param.data(), grad.data(), slots[0].data(), slots[1].data(), beta1_.rate,
                        beta2_.rate, beta1_.complement, beta2_.complement, eps_, keep, bias2_sqrt,
                        neg_step_size, param.size());
  }

 private:
  PST_LOOP void AdamLoop(float* __restrict p, const float* __restrict g, float* __restrict m,
                         float* __restrict v, float b1, float b2, float c1, float c2, float eps,
                         float keep, float bias2_sqrt, float neg_step_size, size_t n) {
    if (keep != 1.0f) {
      for (size_t i = 0; i < n; ++i) p[i] = p[i] * keep;
    }
    for (size_t i = 0; i < n; ++i) {
      m[i] = std::fma(c1, g[i], m[i] * b1);
      v[i] = std::fma(c2 * g[i], g[i], v[i] * b2);
      const float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
      p[i] = p[i] + (neg_step_size * m[i]) / denom;
    }
  }

  const Decay beta1_{config().beta1()};
  const Decay beta2_{config().beta2()};
  const float eps_ = config().epsilon();
  const double decoupled_ = DecimalValue(config().weight_decay());
};

// torch.optim.Adagrad: clr = lr / (1 + (t - 1) * lr_decay);
// sum.addcmul_(g, g, value=1); param.addcdiv_(g, sum.sqrt().add_(eps), value=-clr).
class Adagrad final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* __restrict p = param.data();
    const float* __restrict g = grad.data();
    float* __restrict sum = slots[0].data();
    const size_t n = param.size();
    const float neg_clr =
        static_cast<float>(-(step.lr / (1 + static_cast<double>(step.t - 1) * decay_)));
    RunFused<&AdagradLoop>(p, g, sum, neg_clr, eps_, n);
  }

 private:
  PST_LOOP void AdagradLoop(float* __restrict p, const float* __restrict g, float* __restrict sum,
                            float neg_clr, float eps, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      sum[i] = std::fma(g[i], g[i], sum[i]);
      p[i] = p[i] + (neg_clr * g[i]) / (std::sqrt(sum[i]) + eps);
    }
  }

  const double decay_ = DecimalValue(config().lr_decay());
  const float eps_ = config().epsilon();
};

// torch.optim.RMSprop (rho is torch's alpha):
//   ms.mul_(alpha).addcmul_(g, g, value=1 - alpha)
//   centered: mg.mul_(alpha).add_(g, alpha=1 - alpha);
//             avg = ms.addcmul(mg, mg, value=-1).sqrt_().add_(eps)
//   otherwise avg = ms.sqrt().add_(eps)
//   momentum > 0: buf.mul_(momentum).addcdiv_(g, avg); param.add_(buf, alpha=-lr)
//   otherwise param.addcdiv_(g, avg, value=-lr)
class RmsProp final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    float* buf = momentum_ > 0 ? slots[1].data() : nullptr;
    float* mg = centered_ ? slots[momentum_ > 0 ? 2 : 1].data() : nullptr;
    RmsPropLoop(param.data(), grad.data(), slots[0].data(), buf, mg, static_cast<float>(-step.lr),
                alpha_.rate, alpha_.complement, momentum_, eps_, param.size());
  }

 private:
  // One loop per variant, no branch inside: each vectorizes.
  template <bool kCentered, bool kMomentum>
  PST_LOOP void RmsPropVariant(float* __restrict p, const float* __restrict g, float* __restrict ms,
                               float* __restrict buf, float* __restrict mg, float neg_lr,
                               float alpha, float c, float m, float eps, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      ms[i] = std::fma(c * g[i], g[i], ms[i] * alpha);
      float avg;
      if constexpr (kCentered) {
        mg[i] = std::fma(c, g[i], mg[i] * alpha);
        avg = std::sqrt(std::fma(-1.0f * mg[i], mg[i], ms[i])) + eps;
      } else {
        avg = std::sqrt(ms[i]) + eps;
      }
      if constexpr (kMomentum) {
        buf[i] = buf[i] * m + g[i] / avg;
        p[i] = std::fma(neg_lr, buf[i], p[i]);
      } else {
        p[i] = p[i] + (neg_lr * g[i]) / avg;
      }
    }
  }
  static void RmsPropLoop(float* p, const float* g, float* ms, float* buf, float* mg, float neg_lr,
                          float alpha, float c, float m, float eps, size_t n) {
    if (mg != nullptr && buf != nullptr) {
      RunFused<&RmsPropVariant<true, true>>(p, g, ms, buf, mg, neg_lr, alpha, c, m, eps, n);
    } else if (mg != nullptr) {
      RunFused<&RmsPropVariant<true, false>>(p, g, ms, buf, mg, neg_lr, alpha, c, m, eps, n);
    } else if (buf != nullptr) {
      RunFused<&RmsPropVariant<false, true>>(p, g, ms, buf, mg, neg_lr, alpha, c, m, eps, n);
    } else {
      RunFused<&RmsPropVariant<false, false>>(p, g, ms, buf, mg, neg_lr, alpha, c, m, eps, n);
    }
  }

  const Decay alpha_{config().rho()};
  const float momentum_ = config().momentum();
  const float eps_ = config().epsilon();
  const bool centered_ = config().centered();
};

// torch.optim.Adadelta:
//   ms.mul_(rho).addcmul_(g, g, value=1 - rho);  std = ms.add(eps).sqrt_()
//   delta = acc_delta.add(eps).sqrt_().div_(std).mul_(g)
//   acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
//   param.add_(delta, alpha=-lr)
class Adadelta final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void ApplyRule(std::span<float> param, std::span<const float> grad,
                 std::span<const std::span<float>> slots, const Step& step) override {
    RunFused<&AdadeltaLoop>(param.data(), grad.data(), slots[0].data(), slots[1].data(),
                            static_cast<float>(-step.lr), rho_.rate, rho_.complement, eps_,
                            param.size());
  }

 private:
  PST_LOOP void AdadeltaLoop(float* __restrict p, const float* __restrict g, float* __restrict ms,
                             float* __restrict acc_delta, float neg_lr, float rho, float c,
                             float eps, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      ms[i] = std::fma(c * g[i], g[i], ms[i] * rho);
      const float std_dev = std::sqrt(ms[i] + eps);
      const float delta = std::sqrt(acc_delta[i] + eps) / std_dev * g[i];
      acc_delta[i] = std::fma(c * delta, delta, acc_delta[i] * rho);
      p[i] = std::fma(neg_lr, delta, p[i]);
    }
  }

  const Decay rho_{config().rho()};
  const float eps_ = config().epsilon();
};

PST_LOOP void DecayLoop(float* __restrict g, const float* __restrict p, float decay, size_t n) {
  for (size_t i = 0; i < n; ++i) g[i] = std::fma(decay, p[i], g[i]);
}

}  // namespace

void AddCoupledDecay(float* grad, const float* param, float decay, size_t n) {
  RunFused<&DecayLoop>(grad, param, decay, n);
}

std::unique_ptr<Optimizer> CreateTorchOptimizer(const proto::OptimizerConfig& c) {
  const std::string& name = c.name();
  if (name == "sgd") return std::make_unique<Sgd>(c);
  if (name == "momentum") return std::make_unique<Momentum>(c);
  if (name == "adam" || name == "adamw") return std::make_unique<Adam>(c);
  if (name == "adagrad") return std::make_unique<Adagrad>(c);
  if (name == "rmsprop") return std::make_unique<RmsProp>(c);
  return std::make_unique<Adadelta>(c);
}

}  // namespace pst::ps::internal
