#include "models/registry.h"

#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "models/model_spec.h"

namespace pst::models {
namespace {

proto::TrainingConfig ConfigOf(const Model& model) {
  proto::TrainingConfig training;
  training.set_model(std::string(model.name()));
  training.set_seed(3);
  training.set_embedding_dim(4);
  training.set_batch_size(8);
  training.set_epochs(1);
  return training;
}

TEST(RegistryTest, FindModel_EveryName_FindsTheModelOfThatName) {
  const std::vector<std::string> names = ModelNames();
  ASSERT_GE(names.size(), 2u);
  absl::flat_hash_set<std::string> seen;
  for (const std::string& name : names) {
    EXPECT_TRUE(seen.insert(name).second) << name << " is registered twice";
    absl::StatusOr<const Model*> model = FindModel(name);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->names_file() ? std::string((*model)->name()) + ":FILE"
                                     : std::string((*model)->name()),
              name);
  }
  EXPECT_TRUE(seen.contains("mlp"));
  EXPECT_TRUE(seen.contains("wide_deep"));
}

TEST(RegistryTest, FindModel_UnknownName_InvalidArgumentListsTheKnownModels) {
  absl::StatusOr<const Model*> model = FindModel("resnet");
  ASSERT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("'resnet'"), std::string::npos);
  for (const std::string& name : ModelNames()) {
    EXPECT_NE(model.status().message().find(name), std::string::npos) << name;
  }
}

TEST(RegistryTest, ModelVariables_EveryModel_HasUniquelyNamedFloatVariablesWithInitializers) {
  for (const std::string& name : ModelNames()) {
    const Model& model = **FindModel(name);
    if (model.names_file()) continue;  // its variables are its file's: spec_model_test
    proto::TrainingConfig training = ConfigOf(model);
    absl::StatusOr<std::vector<ModelVariable>> vars = ModelVariables(training);
    ASSERT_TRUE(vars.ok()) << name << ": " << vars.status();
    ASSERT_FALSE(vars->empty()) << name;
    absl::flat_hash_set<std::string> names;
    for (const ModelVariable& v : *vars) {
      EXPECT_TRUE(names.insert(v.spec.name()).second) << name << ": " << v.spec.name();
      EXPECT_EQ(v.spec.dtype(), proto::DT_FLOAT32) << v.spec.name();
      EXPECT_GE(v.spec.shape_size(), 1) << v.spec.name();
      if (v.table) {
        EXPECT_EQ(v.spec.shape_size(), 2) << v.spec.name();
      }
    }
    // The same config gives the same variables: every task computes them.
    absl::StatusOr<std::vector<ModelVariable>> again = ModelVariables(training);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(again->size(), vars->size());
    for (size_t i = 0; i < vars->size(); ++i) {
      EXPECT_EQ((*again)[i].spec.SerializeAsString(), (*vars)[i].spec.SerializeAsString());
    }
    // And a plan over two ps that the model accepts.
    absl::StatusOr<proto::PlacementPlan> plan = BuildPlan(training, 2);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    EXPECT_TRUE(CheckPlanMatches(*plan, *vars).ok()) << name;
  }
}

TEST(RegistryTest, ModelVariables_UnknownModel_IsInvalidArgument) {
  proto::TrainingConfig training;
  training.set_model("resnet");
  EXPECT_EQ(ModelVariables(training).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, Train_DataOfAnotherModel_IsInvalidArgument) {
  struct OtherData : ModelData {
    int64_t size() const override { return 1; }
  } other;
  for (const std::string& name : ModelNames()) {
    const Model& model = **FindModel(name);
    absl::StatusOr<int64_t> trained =
        model.Train(ConfigOf(model), other, 1, /*ps=*/nullptr, LoopControl());
    // A model pstrain does not compute refuses any data.
    EXPECT_EQ(trained.status().code(), model.computed_by_workers()
                                           ? absl::StatusCode::kFailedPrecondition
                                           : absl::StatusCode::kInvalidArgument)
        << name;
  }
}

}  // namespace
}  // namespace pst::models
