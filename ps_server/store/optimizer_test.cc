#include "ps_server/store/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/tensor_util.h"
#include "ps_server/store/loop_dispatch.h"
#include "ps_server/store/variable_store.h"

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
  for (const auto& g : grads) opt.Apply(param, g, views, opt.StepAt(++t));
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
  EXPECT_EQ(CreateOptimizer(Config("lamb", 0.1f)).status().code(),
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
  adam.set_epsilon(-1e-8f);
  EXPECT_EQ(CreateOptimizer(adam).status().code(), absl::StatusCode::kInvalidArgument);
}

proto::OptimizerConfig Adagrad(float lr, float initial_accumulator) {
  proto::OptimizerConfig config = Config("adagrad", lr);
  config.set_initial_accumulator(initial_accumulator);
  return config;
}

proto::OptimizerConfig Ftrl(float lr, float initial_accumulator, float l1, float l2,
                            float lr_power) {
  proto::OptimizerConfig config = Config("ftrl", lr);
  config.set_initial_accumulator(initial_accumulator);
  config.set_l1(l1);
  config.set_l2(l2);
  config.set_lr_power(lr_power);
  return config;
}

proto::OptimizerConfig AdamConfig(float lr) {
  proto::OptimizerConfig config = Config("adam", lr);
  config.set_beta1(0.9f);
  config.set_beta2(0.999f);
  config.set_epsilon(1e-7f);
  return config;
}

// Every optimizer under test, with a label.
std::vector<std::pair<std::string, proto::OptimizerConfig>> AllConfigs() {
  return {
      {"sgd", Config("sgd", 0.1f)},
      {"momentum", Config("momentum", 0.1f, 0.9f)},
      {"nesterov", Config("momentum", 0.1f, 0.9f, /*nesterov=*/true)},
      {"adam", AdamConfig(0.01f)},
      {"adagrad_default_accumulator", Adagrad(0.1f, 0.0f)},
      {"adagrad", Adagrad(0.05f, 0.5f)},
      {"ftrl", Ftrl(0.1f, 0.1f, /*l1=*/0.01f, /*l2=*/0.02f, /*lr_power=*/-0.5f)},
      {"ftrl_power_0.7", Ftrl(0.2f, 0.3f, /*l1=*/0.05f, /*l2=*/0.1f, /*lr_power=*/-0.7f)},
      {"ftrl_fixed_lr", Ftrl(0.05f, 0.0f, /*l1=*/0.02f, /*l2=*/0.01f, /*lr_power=*/0.0f)},
  };
}

// The slots of one element in double precision, as the reference sees them.
std::vector<double> RefSlots(const proto::OptimizerConfig& c) {
  const double init = c.initial_accumulator() == 0 ? 0.1 : c.initial_accumulator();
  if (c.name() == "momentum") return {0.0};
  if (c.name() == "adam") return {0.0, 0.0};
  if (c.name() == "adagrad") return {init};
  if (c.name() == "ftrl") return {init, 0.0};
  return {};
}

// One update of one element, in double precision, written from the
// optimizers' published formulas (TensorFlow's).
void RefStep(const proto::OptimizerConfig& c, double g, int64_t t, double* p,
             std::vector<double>* s) {
  const double lr = c.learning_rate();
  if (c.name() == "sgd") {
    *p -= lr * g;
  } else if (c.name() == "momentum") {
    const double m = c.momentum();
    (*s)[0] = m * (*s)[0] + g;
    *p -= c.nesterov() ? lr * (g + m * (*s)[0]) : lr * (*s)[0];
  } else if (c.name() == "adam") {
    const double b1 = c.beta1(), b2 = c.beta2();
    (*s)[0] = b1 * (*s)[0] + (1 - b1) * g;
    (*s)[1] = b2 * (*s)[1] + (1 - b2) * g * g;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    *p -= lr_t * (*s)[0] / (std::sqrt((*s)[1]) + c.epsilon());
  } else if (c.name() == "adagrad") {
    (*s)[0] += g * g;
    *p -= lr * g / std::sqrt((*s)[0]);
  } else if (c.name() == "ftrl") {
    const double k = -static_cast<double>(c.lr_power());
    const double accum_new = (*s)[0] + g * g;
    (*s)[1] += g - (std::pow(accum_new, k) - std::pow((*s)[0], k)) / lr * *p;
    const double quadratic = std::pow(accum_new, k) / lr + 2 * static_cast<double>(c.l2());
    const double linear = (*s)[1], l1 = c.l1();
    *p = std::abs(linear) > l1 ? ((linear > 0 ? l1 : -l1) - linear) / quadratic : 0.0;
    (*s)[0] = accum_new;
  } else {
    ADD_FAILURE() << "no reference for " << c.name();
  }
}

void ExpectClose(float got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-5 * std::max(1.0, std::abs(want))) << what;
}

const std::vector<std::vector<float>> kGrads = {
    {1.0f, -0.5f, 0.0f, 0.3f},   {0.25f, 2.0f, -0.1f, 0.3f}, {-1.0f, 0.0f, 0.7f, -0.2f},
    {0.5f, 0.5f, -1.5f, 0.05f},  {0.2f, -0.3f, 0.4f, 1.0f},  {-0.6f, 0.8f, 0.1f, -0.9f},
    {0.05f, -1.2f, 0.9f, 0.35f},
};

TEST(OptimizerTest, AllOptimizers_Dense_MatchDoublePrecisionReference) {
  const std::vector<float> init = {0.3f, -0.7f, 0.05f, 1.2f};
  for (const auto& [label, config] : AllConfigs()) {
    auto opt = CreateOptimizer(config);
    ASSERT_TRUE(opt.ok()) << label << ": " << opt.status();
    std::vector<float> param = init;
    std::vector<std::vector<float>> slots;
    for (int s = 0; s < (*opt)->num_slots(); ++s) {
      slots.emplace_back(param.size(), (*opt)->SlotInitialValue(s));
    }
    std::vector<std::span<float>> views(slots.begin(), slots.end());
    std::vector<double> ref_p(init.begin(), init.end());
    std::vector<std::vector<double>> ref_s(init.size(), RefSlots(config));
    ASSERT_EQ(static_cast<int>(ref_s[0].size()), (*opt)->num_slots()) << label;
    for (size_t step = 0; step < kGrads.size(); ++step) {
      const int64_t t = static_cast<int64_t>(step) + 1;
      (*opt)->Apply(param, kGrads[step], views, (*opt)->StepAt(t));
      for (size_t i = 0; i < param.size(); ++i) {
        RefStep(config, kGrads[step][i], t, &ref_p[i], &ref_s[i]);
        ExpectClose(param[i], ref_p[i],
                    label + " step " + std::to_string(t) + " element " + std::to_string(i));
        for (size_t s = 0; s < slots.size(); ++s) {
          ExpectClose(slots[s][i], ref_s[i][s], label + " slot " + std::to_string(s));
        }
      }
    }
  }
}

// Every optimizer, in both forms, over 60 steps of 1,003 elements (the
// vector loops' tails included): the plain x86-64 build of its loops and
// the widest the CPU has (AVX2 or FMA, loop_dispatch.h) give the same bits.
TEST(OptimizerTest, AllOptimizers_PlainAndWideBuilds_GiveTheSameBits) {
  constexpr size_t kN = 1003;
  int compared = 0;
  for (const char* form : {"tensorflow", "torch"}) {
    for (auto [label, config] : AllConfigs()) {
      config.set_form(form);
      std::vector<float> out[2];
      std::vector<std::vector<float>> slots_out[2];
      bool made = true;
      for (int plain = 0; plain < 2; ++plain) {
        internal::SetPlainLoopsForTesting(plain == 1);
        auto opt = CreateOptimizer(config);
        if (!opt.ok()) {  // ftrl has no torch form
          made = false;
          break;
        }
        std::vector<float> param(kN);
        for (size_t i = 0; i < kN; ++i) param[i] = std::sin(0.37 * static_cast<double>(i));
        std::vector<std::vector<float>> slots;
        for (int s = 0; s < (*opt)->num_slots(); ++s) {
          slots.emplace_back(kN, (*opt)->SlotInitialValue(s));
        }
        std::vector<std::span<float>> views(slots.begin(), slots.end());
        std::vector<float> grad(kN);
        for (int64_t t = 1; t <= 60; ++t) {
          for (size_t i = 0; i < kN; ++i) {
            grad[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i * t)) * 0.3);
          }
          (*opt)->Apply(param, grad, views, (*opt)->StepAt(t));
        }
        out[plain] = param;
        slots_out[plain] = slots;
      }
      internal::SetPlainLoopsForTesting(false);
      if (!made) continue;
      ++compared;
      const std::string what = std::string(form) + " " + label;
      ASSERT_EQ(out[0].size(), out[1].size()) << what;
      EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), kN * sizeof(float))) << what;
      for (size_t s = 0; s < slots_out[0].size(); ++s) {
        EXPECT_EQ(0,
                  std::memcmp(slots_out[0][s].data(), slots_out[1][s].data(), kN * sizeof(float)))
            << what << " slot " << s;
      }
    }
  }
  EXPECT_GE(compared, 10);
}

TEST(OptimizerTest, StepAt_TakesTheRateFromTheScheduleAtTheUpdatesBefore) {
  proto::OptimizerConfig config = Config("sgd", 0.5f);
  config.mutable_schedule()->set_kind("step");
  config.mutable_schedule()->set_step_size(2);
  config.mutable_schedule()->set_gamma(0.1f);
  auto opt = CreateOptimizer(config);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_DOUBLE_EQ((*opt)->StepAt(1).lr, 0.5);
  EXPECT_DOUBLE_EQ((*opt)->StepAt(2).lr, 0.5);
  EXPECT_DOUBLE_EQ((*opt)->StepAt(3).lr, 0.05);
  EXPECT_EQ((*opt)->StepAt(3).t, 3);
  // Three sgd updates of gradient 1: 0.5, 0.5, then 0.05.
  const std::vector<float> out = ApplySteps(**opt, {1.0f}, {{1.0f}, {1.0f}, {1.0f}});
  EXPECT_NEAR(out[0], 1.0 - 0.5 - 0.5 - 0.05, 1e-6);
}

TEST(OptimizerTest, Apply_ClipsTheGradientThenAddsTheCoupledDecay) {
  proto::OptimizerConfig config = Config("sgd", 0.1f);
  config.set_clip_value(0.5f);
  config.set_weight_decay(0.2f);
  auto opt = CreateOptimizer(config);
  ASSERT_TRUE(opt.ok()) << opt.status();
  // g = clip(g) + 0.2 * p: 0.5 + 0.4, -0.5 - 0.2, 0.25 + 0 ; p -= 0.1 * g.
  const std::vector<float> out = ApplySteps(**opt, {2.0f, -1.0f, 0.0f}, {{3.0f, -7.0f, 0.25f}});
  EXPECT_NEAR(out[0], 2.0 - 0.1 * 0.9, 1e-6);
  EXPECT_NEAR(out[1], -1.0 - 0.1 * -0.7, 1e-6);
  EXPECT_NEAR(out[2], -0.025, 1e-6);
}

TEST(OptimizerTest, AdamW_DecaysTheParameterApartFromTheGradient) {
  for (const char* form : {"tensorflow", "torch"}) {
    proto::OptimizerConfig adamw = AdamConfig(0.1f);
    adamw.set_name("adamw");
    adamw.set_form(form);
    adamw.set_weight_decay(0.5f);
    auto opt = CreateOptimizer(adamw);
    ASSERT_TRUE(opt.ok()) << opt.status();
    // A zero gradient moves nothing but the decay: p * (1 - 0.1 * 0.5).
    const std::vector<float> out = ApplySteps(**opt, {2.0f, -4.0f}, {{0.0f, 0.0f}});
    EXPECT_NEAR(out[0], 1.9, 1e-6) << form;
    EXPECT_NEAR(out[1], -3.8, 1e-6) << form;
  }
}

TEST(OptimizerTest, Ftrl_L1_DrivesSmallWeightsToExactlyZero) {
  auto opt = CreateOptimizer(Ftrl(0.1f, 0.1f, /*l1=*/10.0f, /*l2=*/0.0f, -0.5f));
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> param = {0.5f, -0.5f};
  std::vector<float> accum(2, 0.1f), linear(2, 0.0f);
  std::vector<std::span<float>> slots = {accum, linear};
  (*opt)->Apply(param, std::vector<float>{0.3f, -0.2f}, slots, (*opt)->StepAt(1));
  EXPECT_EQ(param[0], 0.0f);
  EXPECT_EQ(param[1], 0.0f);
  EXPECT_NE(linear[0], 0.0f);
}

TEST(OptimizerTest, SlotInitialValues_FollowTheConfig) {
  auto adagrad = CreateOptimizer(Adagrad(0.1f, 0.0f));
  ASSERT_TRUE(adagrad.ok());
  EXPECT_EQ((*adagrad)->num_slots(), 1);
  EXPECT_FLOAT_EQ((*adagrad)->SlotInitialValue(0), kDefaultInitialAccumulator);
  auto ftrl = CreateOptimizer(Ftrl(0.1f, 0.25f, 0, 0, -0.5f));
  ASSERT_TRUE(ftrl.ok());
  EXPECT_EQ((*ftrl)->num_slots(), 2);
  EXPECT_FLOAT_EQ((*ftrl)->SlotInitialValue(0), 0.25f);
  EXPECT_FLOAT_EQ((*ftrl)->SlotInitialValue(1), 0.0f);
  auto adam = CreateOptimizer(AdamConfig(0.1f));
  ASSERT_TRUE(adam.ok());
  EXPECT_FLOAT_EQ((*adam)->SlotInitialValue(0), 0.0f);
  EXPECT_FLOAT_EQ((*adam)->SlotInitialValue(1), 0.0f);
}

TEST(OptimizerTest, Create_BadAdagradOrFtrl_IsInvalidArgumentNamingTheField) {
  struct Case {
    proto::OptimizerConfig config;
    std::string field;
  };
  const std::vector<Case> cases = {
      {Adagrad(0.1f, -0.1f), "initial_accumulator"},
      {Adagrad(0.1f, NAN), "initial_accumulator"},
      {Adagrad(0.0f, 0.1f), "learning_rate"},
      {Ftrl(0.1f, -1.0f, 0, 0, -0.5f), "initial_accumulator"},
      {Ftrl(0.1f, 0.1f, -0.1f, 0, -0.5f), "l1"},
      {Ftrl(0.1f, 0.1f, 0, -0.1f, -0.5f), "l2"},
      {Ftrl(0.1f, 0.1f, 0, INFINITY, -0.5f), "l2"},
      {Ftrl(0.1f, 0.1f, 0, 0, 0.5f), "lr_power"},
      {Ftrl(0.1f, 0.1f, 0, 0, NAN), "lr_power"},
  };
  for (const Case& c : cases) {
    absl::Status status = CreateOptimizer(c.config).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.config.DebugString();
    EXPECT_NE(std::string(status.message()).find(c.field), std::string::npos) << status;
  }
  EXPECT_TRUE(CreateOptimizer(Ftrl(0.1f, 0.0f, 0, 0, 0.0f)).ok());
}

// Sparse updates through the store: each push touches a subset of rows of a
// [5, 3] variable (a whole one, or a hash embedding); the touched rows follow
// the reference with t = the variable's update count, and untouched rows
// (and, as later pushes show, their slots) stay exactly as they were.
std::vector<float> PullAllRows(const VariableStore& store, const std::string& name, int rows) {
  proto::PullRowsRequest request;
  proto::RowIds* ids = request.add_rows();
  ids->set_name(name);
  for (int r = 0; r < rows; ++r) ids->add_ids(r);
  proto::PullRowsResponse response;
  absl::Status status = store.PullRows(request, &response);
  EXPECT_TRUE(status.ok()) << status;
  if (!status.ok()) return {};
  std::vector<float> out(response.values(0).data().size() / sizeof(float));
  common::UnpackFloats(response.values(0), out);
  return out;
}

TEST(OptimizerTest, AllOptimizers_SparseThroughStore_LeaveUntouchedRowsAndSlotsAlone) {
  constexpr int kRows = 5, kDim = 3;
  const std::vector<std::vector<int64_t>> pushes = {{0, 2}, {1}, {2, 4}, {0}, {4, 2, 3}, {3, 1}};
  for (const bool hash : {false, true}) {
    for (const auto& [label, config] : AllConfigs()) {
      const std::string what = label + (hash ? " (hash)" : " (dense)");
      VariableStore store;
      proto::CreateVariablesRequest create;
      proto::VariableSpec* spec = create.add_variables();
      spec->set_name("v");
      spec->set_dtype(proto::DT_FLOAT32);
      spec->add_shape(hash ? 0 : kRows);
      spec->add_shape(kDim);
      spec->mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
      spec->mutable_initializer()->set_scale(1.0f);
      spec->mutable_initializer()->set_seed(7);
      if (hash) {
        spec->set_routing(proto::HASH);
        spec->set_num_partitions(1);
      }
      *create.mutable_optimizer() = config;
      ASSERT_TRUE(store.Create(create).ok()) << what;

      std::vector<float> values = PullAllRows(store, "v", kRows);  // makes the hash rows
      ASSERT_EQ(values.size(), static_cast<size_t>(kRows * kDim));
      std::vector<double> ref_p(values.begin(), values.end());
      std::vector<std::vector<double>> ref_s(values.size(), RefSlots(config));
      int64_t t = 0;
      for (const std::vector<int64_t>& ids : pushes) {
        ++t;
        proto::PushRowsRequest push;
        proto::RowIds* rows = push.add_rows();
        rows->set_name("v");
        std::vector<float> grads;
        for (int64_t id : ids) {
          rows->add_ids(id);
          for (int j = 0; j < kDim; ++j) {
            grads.push_back(kGrads[(t + id) % kGrads.size()][j] * (id % 2 == 0 ? 1.0f : -0.5f));
          }
        }
        common::Shape shape;
        shape.Add(static_cast<int64_t>(ids.size()));
        shape.Add(kDim);
        common::PackFloats(grads, shape, push.add_gradients());
        proto::PushRowsResponse response;
        ASSERT_TRUE(store.PushRows(push, &response).ok()) << what;
        ASSERT_EQ(response.versions_size(), 1);
        EXPECT_EQ(response.versions(0), t);

        for (size_t k = 0; k < ids.size(); ++k) {
          for (int j = 0; j < kDim; ++j) {
            const size_t e = ids[k] * kDim + j;
            RefStep(config, grads[k * kDim + j], t, &ref_p[e], &ref_s[e]);
          }
        }
        const std::vector<float> now = PullAllRows(store, "v", kRows);
        for (int r = 0; r < kRows; ++r) {
          const bool touched = std::find(ids.begin(), ids.end(), r) != ids.end();
          for (int j = 0; j < kDim; ++j) {
            const size_t e = r * kDim + j;
            if (touched) {
              ExpectClose(now[e], ref_p[e],
                          what + " push " + std::to_string(t) + " row " + std::to_string(r));
            } else {
              EXPECT_EQ(now[e], values[e]) << what << ": untouched row " << r << " changed";
            }
          }
        }
        values = now;
      }
    }
  }
}

}  // namespace
}  // namespace pst::ps
