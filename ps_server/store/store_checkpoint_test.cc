// What a checkpoint keeps of a bounded hash table beyond its rows (issue
// 32): each row's eviction entry, so that a restored table evicts the rows
// the saved one would have, and the admission counts, so that a restore
// does not forget which ids were close to admission. Through a real shard
// file, as a ps saves and restores.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/shard_reader.h"
#include "ps_server/store/store_restorer.h"
#include "ps_server/store/store_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using testing_util::Adam;
using testing_util::Hash;

constexpr int64_t kDim = 2;

proto::CreateVariablesRequest Create(int64_t capacity, int admit_after) {
  proto::CreateVariablesRequest create;
  *create.mutable_optimizer() = Adam();
  proto::VariableSpec spec = Hash("emb", kDim, admit_after);
  if (capacity > 0) {
    spec.set_capacity(capacity);
    spec.set_eviction("lru");
  }
  *create.add_variables() = spec;
  return create;
}

absl::Status Push(VariableStore& store, int64_t step, const std::vector<int64_t>& ids) {
  proto::PushRowsRequest push;
  push.set_worker_index(0);
  push.set_incarnation(100);
  push.set_step(step);
  push.set_generation(store.generation());  // a restore starts a new one
  proto::RowIds* rows = push.add_rows();
  rows->set_name("emb/part_0");
  for (int64_t id : ids) rows->add_ids(id);
  const std::vector<float> g(ids.size() * kDim, 0.5f);
  const std::vector<int64_t> shape = {static_cast<int64_t>(ids.size()), kDim};
  common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push.add_gradients());
  proto::PushRowsResponse response;
  return store.PushRows(push, &response);
}

// The store's checkpoint, written to a shard file and read back.
std::vector<common::ShardRecord> SaveAndRead(const VariableStore& store) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/store_checkpoint_test_", getpid(),
                                        "_", ::testing::UnitTest::GetInstance()->random_seed(),
                                        ".pst");
  EXPECT_TRUE(common::WriteShardFile(path, store.Snapshot(), nullptr).ok());
  absl::StatusOr<std::vector<common::ShardRecord>> read = common::ReadShardFile(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? *std::move(read) : std::vector<common::ShardRecord>{};
}

std::vector<const common::ShardRecord*> Pointers(const std::vector<common::ShardRecord>& records) {
  std::vector<const common::ShardRecord*> out;
  for (const auto& r : records) out.push_back(&r);
  return out;
}

// The ids a bounded table holds, in id order.
std::vector<int64_t> IdsHeld(const VariableStore& store) {
  std::vector<int64_t> ids;
  for (const common::ShardRecord& r : store.Snapshot()) {
    ids.insert(ids.end(), r.hash_ids.begin(), r.hash_ids.end());
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(StoreCheckpointTest, RestoredBoundedTable_EvictsWhatTheSavedOneWould) {
  VariableStore saved;
  ASSERT_TRUE(saved.Create(Create(/*capacity=*/3, 1)).ok());
  // Rows 1, 2, 3, then 1 again: lru's order is 2, 3, 1.
  ASSERT_TRUE(Push(saved, 0, {1}).ok());
  ASSERT_TRUE(Push(saved, 1, {2}).ok());
  ASSERT_TRUE(Push(saved, 2, {3}).ok());
  ASSERT_TRUE(Push(saved, 3, {1}).ok());
  const std::vector<common::ShardRecord> checkpoint = SaveAndRead(saved);
  ASSERT_EQ(checkpoint.size(), 1u);
  EXPECT_EQ(checkpoint[0].row_last.size(), 3u) << "each row's entry saved";

  VariableStore restored;
  ASSERT_TRUE(restored.Create(Create(3, 1)).ok());
  ASSERT_TRUE(restored.Restore(Pointers(checkpoint), /*generation=*/1).ok());
  // Row 4 makes room: both drop 2, the least recently updated (a restore
  // that forgot the order would drop 1, the lowest id of equals).
  ASSERT_TRUE(Push(saved, 4, {4}).ok());
  ASSERT_TRUE(Push(restored, 4, {4}).ok());
  EXPECT_EQ(IdsHeld(saved), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(IdsHeld(restored), IdsHeld(saved));
}

TEST(StoreCheckpointTest, Restore_RemembersIdsCloseToAdmission) {
  VariableStore saved;
  ASSERT_TRUE(saved.Create(Create(/*capacity=*/0, /*admit_after=*/3)).ok());
  ASSERT_TRUE(Push(saved, 0, {7, 8}).ok());
  ASSERT_TRUE(Push(saved, 1, {7}).ok());  // 7 touched twice, 8 once: no row yet
  ASSERT_TRUE(IdsHeld(saved).empty());
  const std::vector<common::ShardRecord> checkpoint = SaveAndRead(saved);
  ASSERT_FALSE(checkpoint.empty());
  EXPECT_FALSE(checkpoint[0].admission.empty()) << "the admission counts are saved";

  VariableStore restored;
  ASSERT_TRUE(restored.Create(Create(0, 3)).ok());
  ASSERT_TRUE(restored.Restore(Pointers(checkpoint), /*generation=*/1).ok());
  ASSERT_TRUE(Push(restored, 2, {7, 8}).ok());
  // 7's third touch admits it, as it would have without the restore; 8's
  // second does not.
  EXPECT_EQ(IdsHeld(restored), (std::vector<int64_t>{7}));
}

TEST(StoreCheckpointTest, RestoreOntoAnotherPartitioning_MergesTheOldCounts_NeverLate) {
  // Two partitions of "emb" saved, restored into one table of one
  // partition: every old partition's counts, merged.
  std::vector<common::ShardRecord> checkpoint;
  for (int p = 0; p < 2; ++p) {
    VariableStore part;
    proto::CreateVariablesRequest create = Create(0, 3);
    proto::VariableSpec* spec = create.mutable_variables(0);
    spec->set_name(absl::StrCat("emb/part_", p));
    spec->set_partition(p);
    spec->set_num_partitions(2);
    ASSERT_TRUE(part.Create(create).ok());
    proto::PushRowsRequest push;
    push.set_worker_index(0);
    push.set_incarnation(100);
    proto::RowIds* rows = push.add_rows();
    rows->set_name(absl::StrCat("emb/part_", p));
    // Ids of this partition (uint64(id) % 2 == p), each pushed twice.
    for (int64_t id = p; id < 40; id += 2) rows->add_ids(id);
    const std::vector<float> g(rows->ids_size() * kDim, 0.5f);
    const std::vector<int64_t> shape = {rows->ids_size(), kDim};
    common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push.add_gradients());
    proto::PushRowsResponse response;
    for (int step = 0; step < 2; ++step) {
      push.set_step(step);
      ASSERT_TRUE(part.PushRows(push, &response).ok());
    }
    std::vector<common::ShardRecord> records = SaveAndRead(part);
    checkpoint.insert(checkpoint.end(), records.begin(), records.end());
  }
  VariableStore whole;
  ASSERT_TRUE(whole.Create(Create(0, 3)).ok());
  ASSERT_TRUE(whole.Restore(Pointers(checkpoint), /*generation=*/1).ok());
  std::vector<int64_t> all;
  for (int64_t id = 0; id < 40; ++id) all.push_back(id);
  ASSERT_TRUE(Push(whole, 2, all).ok());
  EXPECT_EQ(IdsHeld(whole), all) << "every id's third touch admits it";
}

// A restore as a ps does it (AbsorbShard): a table with a disk tier read
// row by row into a scratch table. Rows of another width are refused before
// anything changes, and the scratch table goes with the restorer.
TEST(StoreCheckpointTest, StreamedRestore_OfAnotherWidth_IsRefused_AndChangesNothing) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/store_checkpoint_test_tier_",
                                       getpid());
  std::filesystem::remove_all(dir);
  std::shared_ptr<DiskTier> tier = DiskTier::Open(dir, {}).value();
  VariableStore::Options options;
  options.disk_tier = tier;
  VariableStore saved(options);
  ASSERT_TRUE(saved.Create(Create(/*capacity=*/3, 1)).ok());
  for (int64_t step = 0; step < 4; ++step) ASSERT_TRUE(Push(saved, step, {step, step + 10}).ok());
  const std::string path = dir + "/shard.pst";
  ASSERT_TRUE(common::WriteShardFile(path, saved.Snapshot(), nullptr).ok());

  proto::CreateVariablesRequest wide = Create(3, 1);
  wide.mutable_variables(0)->set_shape(1, kDim + 1);
  VariableStore other(options);
  ASSERT_TRUE(other.Create(wide).ok());
  const uint64_t before = other.Digest().value();
  {
    std::unique_ptr<StoreRestorer> restorer = other.BeginRestore();
    StoreRestorer* restorers[] = {restorer.get()};
    std::unique_ptr<common::ShardReader> reader = common::ShardReader::Open(path).value();
    absl::Status s = AbsorbShard(*reader, restorers);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("'emb' has rows of 2"), std::string::npos) << s;
  }
  EXPECT_EQ(other.Digest().value(), before);

  // The same width restores, row by row, to the saved rows.
  VariableStore same(options);
  ASSERT_TRUE(same.Create(Create(3, 1)).ok());
  std::unique_ptr<StoreRestorer> restorer = same.BeginRestore();
  StoreRestorer* restorers[] = {restorer.get()};
  std::unique_ptr<common::ShardReader> reader = common::ShardReader::Open(path).value();
  ASSERT_TRUE(AbsorbShard(*reader, restorers).ok());
  ASSERT_TRUE(restorer->Commit(1).ok());
  EXPECT_EQ(same.Digest().value(), saved.Digest().value());
  EXPECT_GT(same.GetStats().AllTables().rows_on_disk, 0);
  tier.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pst::ps
