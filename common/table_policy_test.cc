#include "common/table_policy.h"

#include <gtest/gtest.h>

namespace pst::common {
namespace {

using Eviction = TablePolicy::Eviction;

TEST(TablePolicyTest, PoliciesAndTheirArguments) {
  absl::StatusOr<TablePolicy> none = ParseTablePolicy(0, "", "--table_eviction");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->bounded());

  absl::StatusOr<TablePolicy> capacity_alone = ParseTablePolicy(100, "", "--table_eviction");
  ASSERT_TRUE(capacity_alone.ok()) << capacity_alone.status();
  EXPECT_EQ(capacity_alone->eviction, Eviction::kLru);
  EXPECT_EQ(capacity_alone->capacity, 100);

  absl::StatusOr<TablePolicy> lfu = ParseTablePolicy(5, "lfu", "x");
  ASSERT_TRUE(lfu.ok()) << lfu.status();
  EXPECT_EQ(lfu->eviction, Eviction::kLfu);
  EXPECT_EQ(lfu->lfu_half_life, kDefaultLfuHalfLife);
  absl::StatusOr<TablePolicy> lfu_h = ParseTablePolicy(5, "lfu:12.5", "x");
  ASSERT_TRUE(lfu_h.ok()) << lfu_h.status();
  EXPECT_EQ(lfu_h->lfu_half_life, 12.5);
  EXPECT_EQ(DescribeTablePolicy(*lfu_h), "lfu:12.5");

  absl::StatusOr<TablePolicy> ttl = ParseTablePolicy(0, "ttl:30", "x");
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(ttl->eviction, Eviction::kTtl);
  EXPECT_EQ(ttl->ttl, 30);
  EXPECT_EQ(ttl->capacity, 0);
  EXPECT_EQ(DescribeTablePolicy(*ttl), "ttl:30");
}

TEST(TablePolicyTest, BadPolicies_AreInvalidArgumentNamingTheFlag) {
  for (const auto& [capacity, eviction] : std::vector<std::pair<int64_t, std::string>>{
           {-1, ""}, {10, "lru:3"}, {10, "mru"}, {10, "lfu:0"}, {10, "lfu:x"}, {10, "lfu:-2"},
           {0, "ttl"}, {0, "ttl:0"}, {0, "ttl:1.5"}, {0, "lru"}, {0, "lfu"}, {10, "LRU"}}) {
    absl::StatusOr<TablePolicy> p = ParseTablePolicy(capacity, eviction, "--table_eviction");
    ASSERT_FALSE(p.ok()) << capacity << " " << eviction;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("--table_eviction"), std::string::npos) << p.status();
  }
}

}  // namespace
}  // namespace pst::common
