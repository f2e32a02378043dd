// Variable (variable.h) on its own: ids routed to local rows, row reads and
// row pushes (striped once the first has run), hash rows made on touch
// after admission, a bounded table's eviction under concurrent pushes, and
// SYNC's aggregation.
#include "ps_server/store/variable.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ps_server/store/store_test_util.h"

namespace pst::ps {
namespace {

using testing_util::Dense;
using testing_util::Hash;

std::unique_ptr<Optimizer> Sgd(float lr) {
  proto::OptimizerConfig config;
  config.set_name("sgd");
  config.set_learning_rate(lr);
  return *CreateOptimizer(config);
}

proto::RowIds Ids(std::vector<int64_t> ids) {
  proto::RowIds r;
  for (int64_t id : ids) r.add_ids(id);
  return r;
}

// Rows `local` of `var`, read with ReadRows.
std::vector<float> Read(Variable& var, const std::vector<int64_t>& local) {
  std::vector<float> out(local.size() * var.dim);
  var.ReadRows(local, out.data());
  return out;
}

TEST(VariableTest, LocalRows_RoutesGlobalIdsOfEachKindToLocalRows) {
  std::unique_ptr<Optimizer> sgd = Sgd(1);
  proto::VariableSpec mod = Dense("t/part_1", {5, 2});
  mod.set_variable("t");
  mod.set_routing(proto::MOD);
  mod.set_partition(1);
  mod.set_num_partitions(2);
  mod.add_full_shape(10);
  mod.add_full_shape(2);
  mod.set_row_offset(1);
  mod.set_row_stride(2);
  Variable var(mod, *sgd, {});
  std::vector<int64_t> local;
  ASSERT_TRUE(var.LocalRows(Ids({1, 9, 5}), &local).ok());
  EXPECT_EQ(local, (std::vector<int64_t>{0, 4, 2}));
  EXPECT_EQ(var.LocalRows(Ids({2}), &local).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(var.LocalRows(Ids({10}), &local).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(var.LocalRows(Ids({1, 1}), &local).code(), absl::StatusCode::kInvalidArgument);

  Variable whole(Dense("w", {3, 2}), *sgd, {});
  ASSERT_TRUE(whole.LocalRows(Ids({2, 0}), &local).ok());
  EXPECT_EQ(local, (std::vector<int64_t>{2, 0}));
  EXPECT_FALSE(whole.LocalRows(Ids({3}), &local).ok());

  Variable hash(Hash("emb", 4, 1), *sgd, {});
  ASSERT_TRUE(hash.LocalRows(Ids({-7, 1 << 30}), &local).ok());
  EXPECT_EQ(local, (std::vector<int64_t>{-7, 1 << 30}));
}

TEST(VariableTest, ApplyRows_UpdatesExactlyThoseRows_StripedAfterTheFirst) {
  std::unique_ptr<Optimizer> sgd = Sgd(0.5f);
  Variable var(Dense("w", {4, 2}), *sgd, {});
  const std::vector<float> before = Read(var, {0, 1, 2, 3});
  int64_t dropped = 0;
  const std::vector<float> grad = {1, 2, 3, 4};
  EXPECT_EQ(var.ApplyRows({3, 1}, grad, {false, false}, &dropped), 1);
  {
    absl::ReaderMutexLock lock(&var.mu);
    EXPECT_TRUE(var.row_pushes_striped);
  }
  // The second push runs under the shared lock and the stripes; the
  // skipped row is left.
  EXPECT_EQ(var.ApplyRows({1, 2}, grad, {false, true}, &dropped), 2);
  const std::vector<float> after = Read(var, {0, 1, 2, 3});
  const std::vector<float> expected = {before[0],         before[1],
                                       before[2] - 1.5f - 0.5f, before[3] - 2.0f - 1.0f,
                                       before[4],         before[5],
                                       before[6] - 0.5f,  before[7] - 1.0f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(after[i], expected[i]) << i;
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(var.version.load(), 2);
}

TEST(VariableTest, HashRows_AReadStoresNone_APushMakesAnAdmittedRowAndDropsTheRest) {
  std::unique_ptr<Optimizer> sgd = Sgd(1);
  Variable var(Hash("emb", 2, /*admit_after=*/2), *sgd, {});
  EXPECT_EQ(Read(var, {5}), (std::vector<float>{0, 0}));  // touch 1: zeros
  EXPECT_EQ(var.hash_rows(), 0);
  int64_t dropped = 0;
  const std::vector<float> grad = {1, 1, 1, 1};
  var.ApplyRows({5, 6}, grad, {false, false}, &dropped);  // 5: touch 2; 6: touch 1
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(var.hash_rows(), 1);
  std::vector<float> initial(2);
  {
    absl::ReaderMutexLock lock(&var.mu);
    var.table.InitialValues(5, initial);
  }
  const std::vector<float> row = Read(var, {5});
  EXPECT_FLOAT_EQ(row[0], initial[0] - 1);
  EXPECT_FLOAT_EQ(row[1], initial[1] - 1);
}

TEST(VariableTest, AddToAggregate_AppliesTheMeanAtTheQuorum_RefusesStaleAndRepeats) {
  std::unique_ptr<Optimizer> sgd = Sgd(1);
  Variable var(Dense("b", {2}), *sgd, {});
  absl::MutexLock lock(&var.mu);
  const std::vector<float> before = var.values;
  const std::vector<float> g0 = {2, 4}, g1 = {4, 8};
  EXPECT_EQ(var.AddToAggregateLocked(0, 0, {}, proto::DT_FLOAT32, g0, {}, /*quorum=*/2),
            Variable::SyncAdd::kAdded);
  EXPECT_EQ(var.AddToAggregateLocked(0, 0, {}, proto::DT_FLOAT32, g0, {}, 2),
            Variable::SyncAdd::kDuplicate);
  EXPECT_EQ(var.version.load(), 0);
  EXPECT_EQ(var.AddToAggregateLocked(0, 1, {}, proto::DT_FLOAT32, g1, {}, 2),
            Variable::SyncAdd::kAdded);
  EXPECT_EQ(var.version.load(), 1);
  EXPECT_FLOAT_EQ(var.values[0], before[0] - 3);
  EXPECT_FLOAT_EQ(var.values[1], before[1] - 6);
  EXPECT_TRUE(var.contributors.empty());
  EXPECT_EQ(var.AddToAggregateLocked(0, 0, {}, proto::DT_FLOAT32, g0, {}, 2),
            Variable::SyncAdd::kStale);
}

// Pushes from several threads to a bounded table (striped pushes noting
// updates, pushes that make rows evicting): the table never holds more
// than its capacity, and every row it holds is readable and trained.
TEST(VariableTest, BoundedHashTable_ConcurrentPushes_StayWithinTheCapacity) {
  std::unique_ptr<Optimizer> sgd = Sgd(0.5f);
  proto::VariableSpec spec = Hash("emb", 4, /*admit_after=*/0);
  spec.set_capacity(64);
  spec.set_eviction("lru");
  Variable var(spec, *sgd, {});
  constexpr int kThreads = 4, kPushes = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      // Hot ids 0..31 most of the time, a cold id space of 5000 otherwise.
      std::uniform_int_distribution<int64_t> hot(0, 31), cold(1000, 5999);
      for (int p = 0; p < kPushes; ++p) {
        std::vector<int64_t> ids;
        while (ids.size() < 8) {
          const int64_t id = (rng() % 4 == 0) ? cold(rng) : hot(rng);
          if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
        }
        const std::vector<float> grad(ids.size() * 4, 1.0f);
        int64_t dropped = 0;
        var.ApplyRows(ids, grad, std::vector<bool>(ids.size(), false), &dropped);
        EXPECT_LE(var.hash_rows(), 64);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(var.hash_rows(), 64);
  EXPECT_GT(var.table_unlocked().evictions(), 0);
  EXPECT_EQ(var.table_unlocked().admissions() - var.table_unlocked().evictions(), 64);
  // The hot ids, updated all along, were never the least recent for long:
  // most of them are held, each moved from its initial values.
  int held = 0;
  absl::MutexLock lock(&var.mu);
  for (int64_t id = 0; id < 32; ++id) {
    const float* row = var.table.Find(id);
    if (row == nullptr) continue;
    ++held;
    std::vector<float> initial(4);
    var.table.InitialValues(id, initial);
    EXPECT_LT(row[0], initial[0]) << id;
  }
  EXPECT_GT(held, 24);
}

}  // namespace
}  // namespace pst::ps
