// The optimizer settings' checks, shared by the flags and the ps: each bad
// field named, the default accumulator filled in. ps_server/optimizer_test
// checks the optimizers built from checked settings.
#include "common/optimizer_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace pst::common {
namespace {

proto::OptimizerConfig Config(const std::string& name) {
  proto::OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(0.1f);
  c.set_beta1(0.9f);
  c.set_beta2(0.999f);
  c.set_epsilon(1e-7f);
  c.set_lr_power(-0.5f);
  return c;
}

TEST(OptimizerConfigTest, GoodSettings_PassWithTheDefaultAccumulatorFilledIn) {
  for (const char* name : {"sgd", "momentum", "adam", "adagrad", "ftrl"}) {
    absl::StatusOr<proto::OptimizerConfig> checked = CheckOptimizerConfig(Config(name));
    ASSERT_TRUE(checked.ok()) << name << ": " << checked.status();
    const bool accumulates = std::string(name) == "adagrad" || std::string(name) == "ftrl";
    EXPECT_FLOAT_EQ(checked->initial_accumulator(), accumulates ? kDefaultInitialAccumulator : 0)
        << name;
  }
  proto::OptimizerConfig given = Config("ftrl");
  given.set_initial_accumulator(0.5f);
  EXPECT_FLOAT_EQ(CheckOptimizerConfig(given)->initial_accumulator(), 0.5f);
}

TEST(OptimizerConfigTest, BadSettings_AreInvalidArgumentNamingTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    proto::OptimizerConfig config;
    std::string names;
  };
  std::vector<Case> cases;
  auto add = [&](const std::string& name, auto set, const std::string& names) {
    proto::OptimizerConfig c = Config(name);
    set(c);
    cases.push_back({c, names});
  };
  add(
      "sgd", [&](auto& c) { c.set_learning_rate(0); }, "learning_rate");
  add(
      "sgd", [&](auto& c) { c.set_learning_rate(nan); }, "learning_rate");
  add(
      "momentum", [&](auto& c) { c.set_momentum(1); }, "momentum");
  add(
      "adam", [&](auto& c) { c.set_beta2(1.5f); }, "betas");
  add(
      "adam", [&](auto& c) { c.set_epsilon(-1); }, "epsilon");
  add(
      "adagrad", [&](auto& c) { c.set_initial_accumulator(-1); }, "initial_accumulator");
  add(
      "ftrl", [&](auto& c) { c.set_l1(-0.1f); }, "l1");
  add(
      "ftrl", [&](auto& c) { c.set_l2(nan); }, "l2");
  add(
      "ftrl", [&](auto& c) { c.set_lr_power(0.5f); }, "lr_power");
  add(
      "lamb", [](auto&) {}, "unknown optimizer 'lamb'");
  add(
      "adam", [](auto& c) { c.set_form("keras"); }, "unknown optimizer form 'keras'");
  add(
      "ftrl", [](auto& c) { c.set_form("torch"); }, "ftrl has no torch form");
  add(
      "adamw", [](auto& c) { c.set_weight_decay(-0.1f); }, "weight_decay");
  add(
      "ftrl", [](auto& c) { c.set_weight_decay(0.1f); }, "weight_decay does not apply to ftrl");
  add(
      "adam", [](auto& c) { c.set_lr_decay(0.1f); }, "lr_decay applies to adagrad only");
  add(
      "adam", [](auto& c) { c.set_centered(true); }, "centered applies to rmsprop only");
  add(
      "rmsprop", [](auto& c) { c.set_rho(1.5f); }, "rmsprop rho");
  add(
      "rmsprop", [](auto& c) { c.set_momentum(-0.5f); }, "rmsprop momentum");
  add(
      "adadelta", [&](auto& c) { c.set_epsilon(nan); }, "adadelta epsilon");
  add(
      "sgd", [](auto& c) { c.set_clip_value(-1); }, "clip_value");
  add(
      "sgd", [](auto& c) { c.mutable_schedule()->set_kind("linear"); }, "unknown kind 'linear'");
  for (const Case& c : cases) {
    absl::StatusOr<proto::OptimizerConfig> checked = CheckOptimizerConfig(c.config);
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument) << c.names;
    EXPECT_TRUE(absl::StrContains(checked.status().message(), c.names)) << checked.status();
  }
}

TEST(OptimizerConfigTest, Defaults_AreEachFormsOwn) {
  struct Case {
    std::string name, form;
    float epsilon, rho, initial_accumulator;
  };
  for (const Case& c : std::vector<Case>{{"adam", "", 1e-7f, 0, 0},
                                         {"adam", "torch", 1e-8f, 0, 0},
                                         {"adamw", "torch", 1e-8f, 0, 0},
                                         {"adagrad", "tensorflow", 0, 0, 0.1f},
                                         {"adagrad", "torch", 1e-10f, 0, 0},
                                         {"rmsprop", "tensorflow", 1e-7f, 0.9f, 0},
                                         {"rmsprop", "torch", 1e-8f, 0.99f, 0},
                                         {"adadelta", "tensorflow", 1e-7f, 0.9f, 0},
                                         {"adadelta", "torch", 1e-6f, 0.9f, 0}}) {
    proto::OptimizerConfig config = Config(c.name);
    config.set_form(c.form);
    config.set_epsilon(0);
    absl::StatusOr<proto::OptimizerConfig> checked = CheckOptimizerConfig(config);
    ASSERT_TRUE(checked.ok()) << c.name << " " << c.form << ": " << checked.status();
    EXPECT_EQ(checked->form(), c.form.empty() ? "tensorflow" : c.form);
    EXPECT_EQ(checked->epsilon(), c.epsilon) << c.name << " " << c.form;
    EXPECT_EQ(checked->rho(), c.rho) << c.name << " " << c.form;
    EXPECT_EQ(checked->initial_accumulator(), c.initial_accumulator) << c.name << " " << c.form;
  }
}

TEST(OptimizerConfigTest, SlotNames_FollowTheOptimizerAndItsOptions) {
  auto slots = [](const std::string& name, const std::string& form, float momentum, bool centered) {
    proto::OptimizerConfig c = Config(name);
    c.set_form(form);
    c.set_momentum(momentum);
    c.set_centered(centered);
    absl::StatusOr<proto::OptimizerConfig> checked = CheckOptimizerConfig(c);
    EXPECT_TRUE(checked.ok()) << checked.status();
    return checked.ok() ? OptimizerSlotNames(*checked) : std::vector<std::string>{"?"};
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(slots("sgd", "", 0, false), V{});
  EXPECT_EQ(slots("adamw", "torch", 0, false), (V{"m", "v"}));
  EXPECT_EQ(slots("adadelta", "", 0, false), (V{"accum", "accum_update"}));
  EXPECT_EQ(slots("rmsprop", "tensorflow", 0, false), (V{"ms", "mom"}));
  EXPECT_EQ(slots("rmsprop", "torch", 0, false), (V{"ms"}));
  EXPECT_EQ(slots("rmsprop", "torch", 0.9f, true), (V{"ms", "mom", "mg"}));
  EXPECT_EQ(slots("rmsprop", "torch", 0, true), (V{"ms", "mg"}));
}

}  // namespace
}  // namespace pst::common
