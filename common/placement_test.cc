#include "common/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/partition.h"

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

std::map<std::string, int> PsByName(const proto::PlacementPlan& plan) {
  std::map<std::string, int> out;
  for (const auto& e : plan.variables()) out[e.spec().name()] = e.ps_index();
  return out;
}

std::vector<std::string> Names(const proto::PlacementPlan& plan) {
  std::vector<std::string> out;
  for (const auto& e : plan.variables()) out.push_back(e.spec().name());
  return out;
}

TEST(PlacementTest, BytesPerPs_HashEmbeddingCountsNoRows) {
  proto::VariableSpec hash;
  hash.set_name("hash_emb/part_0");
  hash.add_shape(0);
  hash.add_shape(16);
  proto::PlacementPlan plan;
  plan.set_num_ps(2);
  proto::PlacementPlan::Entry* e = plan.add_variables();
  *e->mutable_spec() = hash;
  e->set_ps_index(1);
  e = plan.add_variables();
  *e->mutable_spec() = Vars({{"a", 5}})[0];
  e->set_ps_index(0);
  EXPECT_EQ(BytesPerPs(plan), (std::vector<int64_t>{20, 0}));
}

TEST(PlacementTest, SpecBytes_DenseAndHash) {
  proto::VariableSpec dense;
  dense.add_shape(784);
  dense.add_shape(256);
  EXPECT_EQ(SpecBytes(dense), 784 * 256 * 4);
  EXPECT_EQ(SpecBytes(dense, 1000), 784 * 256 * 4);  // the guess is for hash rows only
  proto::VariableSpec hash;
  hash.add_shape(0);
  hash.add_shape(16);
  EXPECT_EQ(SpecBytes(hash), 0);
  EXPECT_EQ(SpecBytes(hash, 1000), 1000 * 16 * 4);
  EXPECT_EQ(SpecBytes(hash, -5), 0);
  proto::VariableSpec bad;
  bad.add_shape(-3);
  bad.add_shape(4);
  EXPECT_EQ(SpecBytes(bad), 0);
  proto::VariableSpec huge;
  huge.add_shape(INT64_MAX / 2);
  huge.add_shape(3);
  EXPECT_EQ(SpecBytes(huge), 0);
}

TEST(PlacementTest, SizeBalanced_HandWorked) {
  // Biggest first, each to the lighter ps (ties: ps 0):
  //   a(10) -> 0 [10, 0];  b(9) -> 1 [10, 9];  c(8) -> 1 [10, 17];
  //   d(7) -> 0 [17, 17];  e(1) -> 0 (tie) [18, 17].
  // Given in another order, the plan keeps the input order.
  absl::StatusOr<proto::PlacementPlan> plan =
      PlaceSizeBalanced(Vars({{"c", 8}, {"e", 1}, {"a", 10}, {"d", 7}, {"b", 9}}), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->policy(), "size_balanced");
  EXPECT_EQ(plan->num_ps(), 2);
  EXPECT_EQ(Names(*plan), (std::vector<std::string>{"c", "e", "a", "d", "b"}));
  std::vector<int> got;
  for (const auto& e : plan->variables()) got.push_back(e.ps_index());
  EXPECT_EQ(got, (std::vector<int>{1, 0, 0, 0, 1}));
  EXPECT_EQ(BytesPerPs(*plan), (std::vector<int64_t>{18 * 4, 17 * 4}));
  EXPECT_EQ(plan->variables(0).spec().SerializeAsString(), Vars({{"c", 8}})[0].SerializeAsString());
}

TEST(PlacementTest, SizeBalanced_IndependentOfInputOrder) {
  auto vars = Vars({{"w0", 300},
                    {"w1", 120},
                    {"w2", 120},
                    {"w3", 75},
                    {"w4", 500},
                    {"w5", 8},
                    {"w6", 75},
                    {"w7", 40},
                    {"w8", 120},
                    {"w9", 1}});
  absl::StatusOr<proto::PlacementPlan> base = PlaceSizeBalanced(vars, 3);
  ASSERT_TRUE(base.ok()) << base.status();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(vars.begin(), vars.end(), rng);
    absl::StatusOr<proto::PlacementPlan> plan = PlaceSizeBalanced(vars, 3);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(PsByName(*plan), PsByName(*base)) << "trial " << trial;
    EXPECT_EQ(BytesPerPs(*plan), BytesPerPs(*base));
    std::vector<std::string> want_names;
    for (const auto& v : vars) want_names.push_back(v.name());
    EXPECT_EQ(Names(*plan), want_names);
  }
}

TEST(PlacementTest, SizeBalanced_EqualSizesTakenInNameOrder) {
  // All equal: a -> 0, b -> 1, c -> 0, whatever the input order.
  absl::StatusOr<proto::PlacementPlan> plan =
      PlaceSizeBalanced(Vars({{"b", 5}, {"c", 5}, {"a", 5}}), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PsByName(*plan), (std::map<std::string, int>{{"a", 0}, {"b", 1}, {"c", 0}}));
}

TEST(PlacementTest, SizeBalanced_BeatsRoundRobinWhenSizesAlternate) {
  auto vars = Vars(
      {{"big0", 100}, {"small0", 1}, {"big1", 100}, {"small1", 1}, {"big2", 100}, {"small2", 1}});
  EXPECT_EQ(BytesPerPs(*PlaceRoundRobin(vars, 2)), (std::vector<int64_t>{1200, 12}));
  // big0 -> 0, big1 -> 1, big2 -> 0, then the smalls to ps 1.
  EXPECT_EQ(BytesPerPs(*PlaceSizeBalanced(vars, 2)), (std::vector<int64_t>{800, 412}));
}

TEST(PlacementTest, SizeBalanced_PartitionedEmbeddings_Balanced) {
  // 26 tables of 400000 x 8 floats, each in 8 MOD partitions, plus a small MLP.
  std::vector<proto::VariableSpec> vars;
  for (int t = 0; t < 26; ++t) {
    proto::VariableSpec table;
    table.set_name("emb_" + std::to_string(t));
    table.set_dtype(proto::DT_FLOAT32);
    table.add_shape(400000);
    table.add_shape(8);
    absl::StatusOr<std::vector<proto::VariableSpec>> parts = SplitVariable(table, 8, proto::MOD);
    ASSERT_TRUE(parts.ok()) << parts.status();
    vars.insert(vars.end(), parts->begin(), parts->end());
  }
  const std::vector<std::pair<std::string, std::vector<int64_t>>> dense = {
      {"dense_0/kernel", {221, 256}}, {"dense_0/bias", {256}},     {"dense_1/kernel", {256, 128}},
      {"dense_1/bias", {128}},        {"logits/kernel", {128, 1}}, {"logits/bias", {1}}};
  for (const auto& [name, shape] : dense) {
    proto::VariableSpec spec;
    spec.set_name(name);
    spec.set_dtype(proto::DT_FLOAT32);
    for (int64_t d : shape) spec.add_shape(d);
    vars.push_back(spec);
  }
  absl::StatusOr<proto::PlacementPlan> plan = PlaceSizeBalanced(vars, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->variables_size(), 26 * 8 + 6);
  std::vector<int64_t> bytes = BytesPerPs(*plan);
  int64_t total = 0;
  for (const auto& v : vars) total += SpecBytes(v);
  EXPECT_EQ(bytes[0] + bytes[1], total);
  const double mean = static_cast<double>(total) / 2;
  const double max = static_cast<double>(*std::max_element(bytes.begin(), bytes.end()));
  EXPECT_LE(max / mean, 1.10) << bytes[0] << " vs " << bytes[1];
  // The 208 equal partitions split 104 / 104.
  int on_ps0 = 0;
  for (const auto& e : plan->variables()) {
    if (!e.spec().variable().empty() && e.ps_index() == 0) ++on_ps0;
  }
  EXPECT_EQ(on_ps0, 104);
}

TEST(PlacementTest, SizeBalanced_HashEmbeddingCountsAsGuessedRows) {
  proto::VariableSpec hash;
  hash.set_name("hash_emb");
  hash.set_dtype(proto::DT_FLOAT32);
  hash.add_shape(0);
  hash.add_shape(16);
  std::vector<proto::VariableSpec> vars = Vars({{"a", 10000}, {"b", 6000}});
  vars.push_back(hash);
  // With 1000 guessed rows the hash embedding is the biggest (64000 bytes):
  // hash -> 0, a (40000) -> 1, b (24000) -> 1.
  absl::StatusOr<proto::PlacementPlan> guessed = PlaceSizeBalanced(vars, 2, 1000);
  ASSERT_TRUE(guessed.ok()) << guessed.status();
  EXPECT_EQ(PsByName(*guessed), (std::map<std::string, int>{{"a", 1}, {"b", 1}, {"hash_emb", 0}}));
  // Without a guess it counts 0 bytes and goes last: a -> 0, b -> 1, hash -> 1.
  absl::StatusOr<proto::PlacementPlan> unguessed = PlaceSizeBalanced(vars, 2);
  ASSERT_TRUE(unguessed.ok()) << unguessed.status();
  EXPECT_EQ(PsByName(*unguessed),
            (std::map<std::string, int>{{"a", 0}, {"b", 1}, {"hash_emb", 1}}));
}

TEST(PlacementTest, SizeBalanced_EmptyAndBadInput) {
  absl::StatusOr<proto::PlacementPlan> empty = PlaceSizeBalanced({}, 3);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->variables_size(), 0);
  EXPECT_EQ(BytesPerPs(*empty), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(PlaceSizeBalanced(Vars({{"a", 1}}), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceSizeBalanced(Vars({{"a", 1}, {"a", 2}}), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlacementTest, SizeBalanced_IsDeterministic) {
  auto vars = Vars({{"x", 3}, {"y", 4}, {"z", 5}});
  EXPECT_EQ(PlaceSizeBalanced(vars, 2)->SerializeAsString(),
            PlaceSizeBalanced(vars, 2)->SerializeAsString());
}

TEST(ReplicateShardsTest, BackupIsTheNextPsRoundTheRing) {
  proto::PlacementPlan plan;
  plan.set_num_ps(3);
  ASSERT_TRUE(ReplicateShards(2, &plan).ok());
  EXPECT_EQ(plan.replicas(), 2);
  ASSERT_EQ(plan.shards_size(), 3);
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(plan.shards(g).primary(), g);
    EXPECT_EQ(plan.shards(g).backup(), (g + 1) % 3);
  }
  ASSERT_TRUE(ReplicateShards(1, &plan).ok());
  EXPECT_EQ(plan.replicas(), 0);
  EXPECT_EQ(plan.shards_size(), 0);
}

TEST(ReplicateShardsTest, RefusesWhatItCannotPlace) {
  proto::PlacementPlan plan;
  plan.set_num_ps(1);
  const absl::Status one_ps = ReplicateShards(2, &plan);
  EXPECT_EQ(one_ps.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(one_ps.message().find("at least 2"), std::string::npos) << one_ps;
  plan.set_num_ps(4);
  EXPECT_EQ(ReplicateShards(3, &plan).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::common
