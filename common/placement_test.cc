#include "common/placement.h"

#include <gtest/gtest.h>

namespace pst::common {
namespace {

std::vector<proto::VariableSpec> Vars(std::vector<std::pair<std::string, int64_t>> defs) {
  std::vector<proto::VariableSpec> out;
  for (auto& [name, n] : defs) {
    proto::VariableSpec spec;
    spec.set_name(name);
    spec.set_dtype(proto::DT_FLOAT32);
    spec.add_shape(n);
    out.push_back(spec);
  }
  return out;
}

TEST(PlacementTest, RoundRobin_AssignsInCreationOrder) {
  absl::StatusOr<proto::PlacementPlan> plan =
      PlaceRoundRobin(Vars({{"a", 10}, {"b", 20}, {"c", 30}, {"d", 40}, {"e", 50}}), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<int> got;
  for (const auto& e : plan->variables()) got.push_back(e.ps_index());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(plan->num_ps(), 2);
  EXPECT_EQ(plan->policy(), "round_robin");
  EXPECT_EQ(BytesPerPs(*plan), (std::vector<int64_t>{(10 + 30 + 50) * 4, (20 + 40) * 4}));
}

TEST(PlacementTest, RoundRobin_MorePsThanVariables_LeavesSomeEmpty) {
  absl::StatusOr<proto::PlacementPlan> plan = PlaceRoundRobin(Vars({{"a", 1}, {"b", 1}}), 3);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(BytesPerPs(*plan), (std::vector<int64_t>{4, 4, 0}));
}

TEST(PlacementTest, RoundRobin_IsDeterministic) {
  auto vars = Vars({{"x", 3}, {"y", 4}, {"z", 5}});
  EXPECT_EQ(PlaceRoundRobin(vars, 2)->SerializeAsString(),
            PlaceRoundRobin(vars, 2)->SerializeAsString());
}

TEST(PlacementTest, RoundRobin_BadInput_IsInvalidArgument) {
  EXPECT_EQ(PlaceRoundRobin(Vars({{"a", 1}}), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceRoundRobin(Vars({{"a", 1}, {"a", 2}}), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::common
