// VariableStore's SYNC mode for row pushes: a step's PushRows summed per id
// and applied once, with the mean's scale; stale, repeated and early pushes;
// backup workers; admission applied once per step; the cut and a restore.
#include <gtest/gtest.h>

#include <vector>

#include "common/tensor_util.h"
#include "ps_server/store/store_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using testing_util::Dense;
using testing_util::Hash;

// A MOD partition "t/part_0" (ids 0, 2, 4, 6 of 8 rows, width 2) and a hash
// table "h" (width 2, admit_after `admit`), SGD with learning rate 1.
proto::CreateVariablesRequest Create(int workers, int replicas, int admit = 0) {
  proto::CreateVariablesRequest create;
  proto::VariableSpec mod = Dense("t/part_0", {4, 2});
  mod.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  mod.set_variable("t");
  mod.set_partition(0);
  mod.set_num_partitions(2);
  mod.set_routing(proto::MOD);
  mod.add_full_shape(8);
  mod.add_full_shape(2);
  mod.set_row_offset(0);
  mod.set_row_stride(2);
  *create.add_variables() = mod;
  proto::VariableSpec hash = Hash("h", 2, admit);
  hash.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  *create.add_variables() = hash;
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  create.mutable_sync()->set_mode(proto::SYNC);
  create.mutable_sync()->set_num_workers(workers);
  create.mutable_sync()->set_replicas_to_aggregate(replicas);
  return create;
}

void AddRows(proto::PushRowsRequest* push, const std::string& name, std::vector<int64_t> ids,
             std::vector<float> grad) {
  proto::RowIds* rows = push->add_rows();
  rows->set_name(name);
  for (int64_t id : ids) rows->add_ids(id);
  common::Shape shape;
  shape.Add(static_cast<int64_t>(ids.size()));
  shape.Add(2);
  common::PackFloats(grad, shape, push->add_gradients());
}

// Worker `worker`'s push for `step`: rows of both tables (either may be
// empty, as PsClient sends in SYNC).
proto::PushRowsRequest Push(int worker, int64_t step, std::vector<int64_t> mod_ids,
                            std::vector<float> mod_grad, std::vector<int64_t> hash_ids,
                            std::vector<float> hash_grad) {
  proto::PushRowsRequest push;
  push.set_worker_index(worker);
  push.set_incarnation(100 + worker);
  push.set_step(step);
  AddRows(&push, "t/part_0", std::move(mod_ids), std::move(mod_grad));
  AddRows(&push, "h/part_0", std::move(hash_ids), std::move(hash_grad));
  return push;
}

// Rows of one table, flattened.
std::vector<float> Rows(const VariableStore& store, const std::string& name,
                        std::vector<int64_t> ids, int64_t* version = nullptr) {
  proto::PullRowsRequest pull;
  proto::RowIds* rows = pull.add_rows();
  rows->set_name(name);
  for (int64_t id : ids) rows->add_ids(id);
  proto::PullRowsResponse response;
  EXPECT_TRUE(store.PullRows(pull, &response).ok());
  std::vector<float> out(ids.size() * 2);
  common::UnpackFloats(response.values(0), out);
  if (version != nullptr) *version = response.versions(0);
  return out;
}

TEST(SyncRowsTest, TwoWorkers_StepAppliedOnceWithTheMeanOfTheirPushes) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(2, 2)).ok());
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(Push(0, 0, {0, 2}, {2, 4, 6, 8}, {5}, {1, 1}), &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {0, 2}), (std::vector<float>{0, 0, 0, 0}))
      << "nothing applied before the quorum";
  VariableStore::Cut cut;
  store.Snapshot(nullptr, &cut);
  EXPECT_TRUE(cut.sync_pending) << "worker 0's rows wait for worker 1's";
  // Worker 1 holds other ids: each id's sum is divided by the 2 pushes.
  ASSERT_TRUE(store.PushRows(Push(1, 0, {2, 4}, {10, 20, 30, 40}, {}, {}), &response).ok());
  int64_t version = 0;
  EXPECT_EQ(Rows(store, "t/part_0", {0, 2, 4}, &version),
            (std::vector<float>{-1, -2, -8, -14, -15, -20}));
  EXPECT_EQ(version, 1) << "one version per step";
  EXPECT_EQ(Rows(store, "h/part_0", {5}, &version), (std::vector<float>{-0.5f, -0.5f}));
  EXPECT_EQ(version, 1) << "a table the push held no ids of moves on too";
  store.Snapshot(nullptr, &cut);
  EXPECT_FALSE(cut.sync_pending);
  EXPECT_EQ(cut.max_version, 1);
}

TEST(SyncRowsTest, RetriedAndLatePushes_AreCountedOnce_EarlyOnesRefused) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(2, 2)).ok());
  proto::PushRowsResponse response;
  const proto::PushRowsRequest first = Push(0, 0, {0}, {2, 2}, {}, {});
  ASSERT_TRUE(store.PushRows(first, &response).ok());
  ASSERT_TRUE(store.PushRows(first, &response).ok()) << "a retry is acknowledged";
  EXPECT_EQ(store.GetStats().duplicates_ignored, 1);
  EXPECT_EQ(Rows(store, "t/part_0", {0}), (std::vector<float>{0, 0})) << "and not the quorum";
  EXPECT_EQ(store.PushRows(Push(1, 1, {0}, {2, 2}, {}, {}), &response).code(),
            absl::StatusCode::kAborted)
      << "step 1 before step 0 is applied";
  ASSERT_TRUE(store.PushRows(Push(1, 0, {0}, {4, 4}, {}, {}), &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {0}), (std::vector<float>{-3, -3}));
  ASSERT_TRUE(store.PushRows(first, &response).ok()) << "a retry after the step: stale";
  EXPECT_EQ(Rows(store, "t/part_0", {0}), (std::vector<float>{-3, -3}));
  EXPECT_EQ(store.GetStats().stale_dropped, 1);
}

TEST(SyncRowsTest, BackupWorker_QuorumOneOfTwo_LatePushIsDropped) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(2, /*replicas=*/1)).ok());
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(Push(1, 0, {2}, {4, 4}, {7}, {2, 2}), &response).ok());
  int64_t version = 0;
  EXPECT_EQ(Rows(store, "t/part_0", {2}, &version), (std::vector<float>{-4, -4}))
      << "the first push of the step is the whole step";
  EXPECT_EQ(version, 1);
  ASSERT_TRUE(store.PushRows(Push(0, 0, {2}, {100, 100}, {7}, {100, 100}), &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {2}), (std::vector<float>{-4, -4}));
  EXPECT_EQ(Rows(store, "h/part_0", {7}), (std::vector<float>{-2, -2}));
  EXPECT_EQ(store.GetStats().stale_dropped, 1);
  ASSERT_TRUE(store.PushRows(Push(0, 1, {2}, {1, 1}, {}, {}), &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {2}, &version), (std::vector<float>{-5, -5}));
  EXPECT_EQ(version, 2);
}

TEST(SyncRowsTest, WorkerLeaving_LowersTheQuorum_AndAppliesTheWaitingRows) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(2, 2)).ok());
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(Push(0, 0, {4}, {6, 6}, {}, {}), &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {4}), (std::vector<float>{0, 0}));
  proto::MembershipRequest membership;
  membership.add_active_workers(0);
  membership.set_replicas_to_aggregate(2);
  ASSERT_TRUE(store.SetMembership(membership).ok());
  int64_t version = 0;
  EXPECT_EQ(Rows(store, "t/part_0", {4}, &version), (std::vector<float>{-6, -6}));
  EXPECT_EQ(version, 1);
}

TEST(SyncRowsTest, NotAdmittedIds_CountOneTouchPerStep_AppliedOnceAdmitted) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(2, 2, /*admit=*/2)).ok());
  proto::PushRowsResponse response;
  // Both workers push id 9 at step 0: one touch (the step's), dropped.
  ASSERT_TRUE(store.PushRows(Push(0, 0, {}, {}, {9}, {2, 2}), &response).ok());
  ASSERT_TRUE(store.PushRows(Push(1, 0, {}, {}, {9}, {2, 2}), &response).ok());
  EXPECT_EQ(store.GetStats().unadmitted_dropped, 1);
  EXPECT_EQ(store.GetStats().hash_rows, 0);
  // Step 1: the second touch admits it, and the step's mean applies.
  ASSERT_TRUE(store.PushRows(Push(0, 1, {}, {}, {9}, {2, 2}), &response).ok());
  ASSERT_TRUE(store.PushRows(Push(1, 1, {}, {}, {9}, {4, 4}), &response).ok());
  EXPECT_EQ(store.GetStats().unadmitted_dropped, 1);
  EXPECT_EQ(store.GetStats().hash_rows, 1);
  EXPECT_EQ(Rows(store, "h/part_0", {9}), (std::vector<float>{-3, -3}));
}

// Worker 0's rows for step 0 are summed, then the store is restored, to
// `generation`, from a snapshot taken before: the sum is dropped, so
// worker 1's push alone does not make the quorum of 2.
void ExpectRestoreDropsTheRowsSummedBefore(int64_t generation) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(2, 2)).ok());
  const std::vector<common::ShardRecord> records = store.Snapshot();
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(Push(0, 0, {0}, {8, 8}, {}, {}), &response).ok());
  std::vector<const common::ShardRecord*> from;
  for (const common::ShardRecord& r : records) from.push_back(&r);
  ASSERT_TRUE(store.Restore(from, generation).ok());
  VariableStore::Cut cut;
  store.Snapshot(nullptr, &cut);
  EXPECT_FALSE(cut.sync_pending) << "the restore replaced what the rows were summed for";
  proto::PushRowsRequest push = Push(1, 0, {0}, {2, 2}, {}, {});
  push.set_generation(generation);
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {0}), (std::vector<float>{0, 0}))
      << "worker 0's push before the restore does not make the quorum";
  push = Push(0, 0, {0}, {4, 4}, {}, {});
  push.set_generation(generation);
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(Rows(store, "t/part_0", {0}), (std::vector<float>{-3, -3}));
}

TEST(SyncRowsTest, Restore_DropsTheRowsSummedBefore) { ExpectRestoreDropsTheRowsSummedBefore(1); }

// To the same generation and version (as a test may do) too: nothing but
// the restore tells the stale sum from a current one.
TEST(SyncRowsTest, RestoreToTheSameGenerationAndVersion_DropsTheRowsSummedBefore) {
  ExpectRestoreDropsTheRowsSummedBefore(0);
}

TEST(SyncRowsTest, Cut_RowsAheadOfTheDenseVariables_IsPartOfAStep) {
  VariableStore store;
  proto::CreateVariablesRequest create = Create(1, 1);
  *create.add_variables() = Dense("bias", {1});
  ASSERT_TRUE(store.Create(create).ok());
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(Push(0, 0, {0}, {1, 1}, {}, {}), &response).ok());
  VariableStore::Cut cut;
  store.Snapshot(nullptr, &cut);
  EXPECT_TRUE(cut.sync_pending) << "step 0's rows are applied, its dense push not yet";
  proto::PushRequest dense;
  dense.set_worker_index(0);
  dense.set_step(0);
  dense.add_names("bias");
  common::Shape shape;
  shape.Add(1);
  common::PackFloats(std::vector<float>{1}, shape, dense.add_gradients());
  proto::PushResponse pushed;
  ASSERT_TRUE(store.Push(dense, &pushed).ok());
  store.Snapshot(nullptr, &cut);
  EXPECT_FALSE(cut.sync_pending);
  EXPECT_EQ(cut.max_version, 1);
}

// A backup sent the store whole (state transfer) while a step's rows are
// half summed carries them: worker 0's retry is a repeat on both, and
// worker 1's push completes the step alike.
TEST(SyncRowsTest, ExportState_CarriesTheRowsSummed) {
  VariableStore original;
  ASSERT_TRUE(original.Create(Create(2, 2)).ok());
  proto::PushRowsResponse response;
  const proto::PushRowsRequest first = Push(0, 0, {0, 6}, {1, 2, 3, 4}, {11, 12}, {5, 6, 7, 8});
  ASSERT_TRUE(original.PushRows(first, &response).ok());
  VariableStore copy;
  const std::vector<proto::StoreChunk> parts =
      TakeAllParts(*original.ExportState(/*part_bytes=*/1024).value()).value();
  for (const proto::StoreChunk& part : parts) {
    ASSERT_TRUE(copy.LoadState(part).ok()) << "part " << part.part();
  }
  VariableStore::Cut cut;
  copy.Snapshot(nullptr, &cut);
  EXPECT_TRUE(cut.sync_pending) << "the copy holds worker 0's rows";
  for (VariableStore* store : {&original, &copy}) {
    ASSERT_TRUE(store->PushRows(first, &response).ok());
    ASSERT_TRUE(store->PushRows(Push(1, 0, {6}, {2, 2}, {12}, {2, 2}), &response).ok());
  }
  EXPECT_EQ(Rows(copy, "t/part_0", {0, 6}), (std::vector<float>{-0.5f, -1, -2.5f, -3}));
  EXPECT_EQ(Rows(copy, "h/part_0", {11, 12}), Rows(original, "h/part_0", {11, 12}));
  EXPECT_EQ(copy.Digest().value(), original.Digest().value());
}

}  // namespace
}  // namespace pst::ps
