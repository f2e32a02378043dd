// The optimizer settings' checks, shared by the flags and the ps: each bad
// field named, the default accumulator filled in. ps_server/optimizer_test
// checks the optimizers built from checked settings.
#include "common/optimizer_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
      "adam", [&](auto& c) { c.set_epsilon(0); }, "epsilon");
  add(
      "adagrad", [&](auto& c) { c.set_initial_accumulator(-1); }, "initial_accumulator");
  add(
      "ftrl", [&](auto& c) { c.set_l1(-0.1f); }, "l1");
  add(
      "ftrl", [&](auto& c) { c.set_l2(nan); }, "l2");
  add(
      "ftrl", [&](auto& c) { c.set_lr_power(0.5f); }, "lr_power");
  add(
      "rmsprop", [](auto&) {}, "unknown optimizer 'rmsprop'");
  for (const Case& c : cases) {
    absl::StatusOr<proto::OptimizerConfig> checked = CheckOptimizerConfig(c.config);
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument) << c.names;
    EXPECT_TRUE(absl::StrContains(checked.status().message(), c.names)) << checked.status();
  }
}

}  // namespace
}  // namespace pst::common
