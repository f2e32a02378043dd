// The job's optimizer from the flags and from a model spec: which wins,
// the per-optimizer defaults of --momentum, and refusals naming the source.
#include "flags/optimizer_flags.h"

#include <gtest/gtest.h>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "flags/job_flags.h"
#include "models/registry.h"

namespace pst::flags {
namespace {

const models::Model& Mlp() {
  proto::TrainingConfig training;
  training.set_model("mlp");
  return **models::ModelFor(training);
}

TEST(OptimizerFlagsTest, Flags_BuildTheOptimizer_MomentumDefaultingPerOptimizer) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_optimizer, "momentum");
  proto::TrainingConfig config;
  ASSERT_TRUE(OptimizerFromFlags(Mlp(), &config).ok());
  EXPECT_EQ(config.optimizer().momentum(), 0.9f);
  EXPECT_EQ(config.optimizer().learning_rate(), 0.001f);  // the model's
  absl::SetFlag(&FLAGS_optimizer, "rmsprop");
  absl::SetFlag(&FLAGS_optimizer_form, "torch");
  absl::SetFlag(&FLAGS_lr_schedule, "warmup:10,cosine:100");
  absl::SetFlag(&FLAGS_clip_norm, 2.5);
  ASSERT_TRUE(OptimizerFromFlags(Mlp(), &config).ok());
  EXPECT_EQ(config.optimizer().name(), "rmsprop");
  EXPECT_EQ(config.optimizer().momentum(), 0.0f);
  EXPECT_EQ(config.optimizer().form(), "torch");
  EXPECT_EQ(config.optimizer().schedule().kind(), "cosine");
  EXPECT_EQ(config.optimizer().schedule().warmup(), 10);
  EXPECT_EQ(config.clip_norm(), 2.5f);
}

proto::TrainingConfig WithSpecOptimizer() {
  proto::TrainingConfig config;
  config.set_model("spec:/tmp/cnn.json");
  proto::OptimizerConfig* opt = config.mutable_optimizer();
  opt->set_name("adadelta");
  opt->set_form("torch");
  opt->set_learning_rate(1.0f);
  opt->mutable_schedule()->set_kind("step");
  opt->mutable_schedule()->set_step_size(1);
  opt->mutable_schedule()->set_gamma(0.7f);
  return config;
}

TEST(OptimizerFlagsTest, SpecOptimizer_StandsUnlessOptimizerIsGiven) {
  absl::FlagSaver saver;
  proto::TrainingConfig config = WithSpecOptimizer();
  absl::SetFlag(&FLAGS_beta1, 0.5);  // a hyperparameter flag: not the spec's
  ASSERT_TRUE(OptimizerFromFlags(Mlp(), &config).ok());
  EXPECT_EQ(config.optimizer().name(), "adadelta");
  EXPECT_EQ(config.optimizer().learning_rate(), 1.0f);
  EXPECT_EQ(config.optimizer().beta1(), 0.0f);
  EXPECT_EQ(config.optimizer().schedule().kind(), "step");
  // The rate, schedule and clipping flags apply to it when given.
  config = WithSpecOptimizer();
  absl::SetFlag(&FLAGS_learning_rate, 0.5);
  absl::SetFlag(&FLAGS_lr_schedule, "exponential:0.9");
  absl::SetFlag(&FLAGS_clip_value, 3.0);
  ASSERT_TRUE(OptimizerFromFlags(Mlp(), &config).ok());
  EXPECT_EQ(config.optimizer().name(), "adadelta");
  EXPECT_EQ(config.optimizer().learning_rate(), 0.5f);
  EXPECT_EQ(config.optimizer().schedule().kind(), "exponential");
  EXPECT_EQ(config.optimizer().clip_value(), 3.0f);
  // --optimizer replaces the spec's whole optimizer.
  config = WithSpecOptimizer();
  absl::SetFlag(&FLAGS_optimizer, "adam");
  ASSERT_TRUE(OptimizerFromFlags(Mlp(), &config).ok());
  EXPECT_EQ(config.optimizer().name(), "adam");
  EXPECT_EQ(config.optimizer().form(), "");
  EXPECT_EQ(config.optimizer().beta1(), 0.5f);
}

TEST(OptimizerFlagsTest, BadSettings_NameTheirSource) {
  absl::FlagSaver saver;
  proto::TrainingConfig config = WithSpecOptimizer();
  config.mutable_optimizer()->set_rho(2.0f);
  absl::Status s = OptimizerFromFlags(Mlp(), &config);
  EXPECT_TRUE(absl::StrContains(s.message(), "the optimizer of spec:/tmp/cnn.json: adadelta rho"))
      << s;
  config = proto::TrainingConfig();
  absl::SetFlag(&FLAGS_optimizer, "adam");
  absl::SetFlag(&FLAGS_weight_decay, -1.0);
  s = OptimizerFromFlags(Mlp(), &config);
  EXPECT_TRUE(absl::StrContains(s.message(), "optimizer flags: optimizer weight_decay")) << s;
  absl::SetFlag(&FLAGS_weight_decay, 0.0);
  absl::SetFlag(&FLAGS_lr_schedule, "step:5");
  s = OptimizerFromFlags(Mlp(), &config);
  EXPECT_TRUE(absl::StrContains(s.message(), "--lr_schedule: step needs a gamma")) << s;
}

}  // namespace
}  // namespace pst::flags
