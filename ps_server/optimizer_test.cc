#include "ps_server/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace pst::ps {
namespace {

proto::OptimizerConfig Config(const std::string& name, float lr, float momentum = 0,
                              bool nesterov = false) {
  proto::OptimizerConfig config;
  config.set_name(name);
  config.set_learning_rate(lr);
  config.set_momentum(momentum);
  config.set_nesterov(nesterov);
  return config;
}

// Applies `steps` updates of `grads[t]` to `param`, with the slots the
// optimizer asks for.
std::vector<float> ApplySteps(Optimizer& opt, std::vector<float> param,
                              const std::vector<std::vector<float>>& grads) {
  std::vector<std::vector<float>> slots(opt.num_slots(), std::vector<float>(param.size(), 0.0f));
  std::vector<std::span<float>> views(slots.begin(), slots.end());
  int64_t t = 0;
  for (const auto& g : grads) opt.ApplyDense(param, g, views, ++t);
  return param;
}

TEST(OptimizerTest, Sgd_MatchesHandComputedSteps) {
  auto opt = CreateOptimizer(Config("sgd", 0.5f));
  ASSERT_TRUE(opt.ok()) << opt.status();
  // p = 1 - 0.5*0.2 - 0.5*(-0.4) = 1.1 ; p = -2 - 0.5*1 - 0.5*1 = -3
  const std::vector<float> out = ApplySteps(**opt, {1.0f, -2.0f}, {{0.2f, 1.0f}, {-0.4f, 1.0f}});
  EXPECT_FLOAT_EQ(out[0], 1.1f);
  EXPECT_FLOAT_EQ(out[1], -3.0f);
}

TEST(OptimizerTest, Momentum_MatchesDoublePrecisionReference) {
  for (bool nesterov : {false, true}) {
    auto opt = CreateOptimizer(Config("momentum", 0.1f, 0.9f, nesterov));
    ASSERT_TRUE(opt.ok()) << opt.status();
    const std::vector<std::vector<float>> grads = {{1.0f, -0.5f}, {0.25f, 2.0f}, {-1.0f, 0.0f}};
    const std::vector<float> out = ApplySteps(**opt, {0.3f, -0.7f}, grads);
    for (int i = 0; i < 2; ++i) {
      double p = i == 0 ? 0.3 : -0.7, a = 0;
      for (const auto& g : grads) {
        a = 0.9 * a + g[i];
        p -= nesterov ? 0.1 * (g[i] + 0.9 * a) : 0.1 * a;
      }
      EXPECT_NEAR(out[i], p, 1e-6) << "nesterov=" << nesterov << " i=" << i;
    }
  }
}

TEST(OptimizerTest, Adam_MatchesDoublePrecisionReference) {
  proto::OptimizerConfig config = Config("adam", 0.01f);
  config.set_beta1(0.9f);
  config.set_beta2(0.999f);
  config.set_epsilon(1e-7f);
  auto opt = CreateOptimizer(config);
  ASSERT_TRUE(opt.ok()) << opt.status();
  const std::vector<std::vector<float>> grads = {
      {1.0f, -0.5f}, {0.25f, 2.0f}, {-1.0f, 0.0f}, {0.5f, 0.5f}};
  const std::vector<float> out = ApplySteps(**opt, {0.3f, -0.7f}, grads);
  for (int i = 0; i < 2; ++i) {
    double p = i == 0 ? 0.3 : -0.7, m = 0, v = 0;
    int t = 0;
    for (const auto& g : grads) {
      ++t;
      m = 0.9 * m + 0.1 * g[i];
      v = 0.999 * v + 0.001 * g[i] * g[i];
      const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      p -= lr_t * m / (std::sqrt(v) + 1e-7);
    }
    EXPECT_NEAR(out[i], p, 1e-6) << "i=" << i;
  }
}

TEST(OptimizerTest, Create_BadConfig_IsInvalidArgument) {
  EXPECT_EQ(CreateOptimizer(Config("adamw", 0.1f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateOptimizer(Config("sgd", 0.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateOptimizer(Config("sgd", -1.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateOptimizer(Config("momentum", 0.1f, 1.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  proto::OptimizerConfig adam = Config("adam", 0.1f);
  adam.set_beta1(0.9f);
  adam.set_beta2(1.0f);
  adam.set_epsilon(1e-7f);
  EXPECT_EQ(CreateOptimizer(adam).status().code(), absl::StatusCode::kInvalidArgument);
  adam.set_beta2(0.999f);
  adam.set_epsilon(0.0f);
  EXPECT_EQ(CreateOptimizer(adam).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::ps
