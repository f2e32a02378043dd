// Optimizer groups: which variables a pattern takes, which optimizer each
// variable gets, and the refusals (a pattern that matches nothing, a
// variable in two groups, a bad optimizer), each naming the group.
#include "common/optimizer_groups.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace pst::common {
namespace {

const std::vector<GroupedVariable> kVariables = {{"dense_0/kernel", false},
                                                 {"dense_0/bias", false},
                                                 {"deep_embedding", true},
                                                 {"wide_embedding", true}};

proto::OptimizerConfig Named(const std::string& name) {
  proto::OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(0.05f);
  return c;
}

proto::TrainingConfig Job(std::vector<std::pair<std::vector<std::string>, std::string>> groups) {
  proto::TrainingConfig training;
  *training.mutable_optimizer() = Named("adam");
  for (const auto& [match, name] : groups) {
    proto::OptimizerGroup* g = training.add_optimizer_groups();
    for (const std::string& m : match) g->add_match(m);
    *g->mutable_optimizer() = Named(name);
  }
  return training;
}

TEST(OptimizerGroupsTest, Patterns_TakeTablesDenseOrNames) {
  EXPECT_TRUE(GroupMatches("tables", kVariables[2]));
  EXPECT_FALSE(GroupMatches("tables", kVariables[0]));
  EXPECT_TRUE(GroupMatches("dense", kVariables[1]));
  EXPECT_TRUE(GroupMatches("*_embedding", kVariables[3]));
  EXPECT_TRUE(GroupMatches("dense_?/kernel", kVariables[0]));
  EXPECT_FALSE(GroupMatches("dense_?/kernel", kVariables[1]));
}

TEST(OptimizerGroupsTest, OptimizerOf_IsTheGroupsOrTheJobs) {
  const proto::TrainingConfig job = Job({{{"tables"}, "adagrad"}, {{"*/bias"}, "sgd"}});
  ASSERT_TRUE(CheckOptimizerGroups(job, kVariables).ok()) << CheckOptimizerGroups(job, kVariables);
  EXPECT_EQ(OptimizerOf(job, kVariables[0]).name(), "adam");
  EXPECT_EQ(OptimizerOf(job, kVariables[1]).name(), "sgd");
  EXPECT_EQ(OptimizerOf(job, kVariables[2]).name(), "adagrad");
  EXPECT_EQ(OptimizerOf(job, kVariables[3]).name(), "adagrad");
  EXPECT_EQ(OptimizerOf(Job({}), kVariables[2]).name(), "adam");
}

TEST(OptimizerGroupsTest, BadGroups_AreRefusedNamingTheGroup) {
  auto refused = [](const proto::TrainingConfig& job, const std::string& says) {
    const absl::Status s = CheckOptimizerGroups(job, kVariables);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << says;
    EXPECT_TRUE(absl::StrContains(s.message(), says)) << s;
  };
  refused(Job({{{"tables"}, "adagrad"}, {{"emb*"}, "ftrl"}}),
          "optimizer group 1 (emb*): 'emb*' matches no variable");
  refused(Job({{{"tables"}, "adagrad"}, {{"deep_*"}, "ftrl"}}),
          "variable 'deep_embedding' is in optimizer group 0 (tables) and in optimizer group 1 "
          "(deep_*): a variable has one optimizer");
  refused(Job({{{"tables"}, "lamb"}}), "optimizer group 0 (tables): unknown optimizer 'lamb'");
  refused(Job({{{}, "adagrad"}}), "names no variables");
  // One group may name a variable twice.
  EXPECT_TRUE(CheckOptimizerGroups(Job({{{"tables", "deep_*"}, "adagrad"}}), kVariables).ok());
}

}  // namespace
}  // namespace pst::common
