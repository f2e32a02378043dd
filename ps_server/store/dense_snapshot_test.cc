// Copy-on-write snapshots of dense variables (dense_snapshot.h, through
// VariableStore::Snapshot with a copy budget): a record reads its variable
// as of the snapshot's instant whatever pushes came after, a push copies
// within the budget and otherwise waits for the record to be read, and a
// record dropped unread, an older snapshot, a restore and a removed
// variable all leave every record its instant's values.
#include "ps_server/store/dense_snapshot.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint_format.h"
#include "ps_server/store/store_restorer.h"
#include "ps_server/store/store_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using testing_util::Adam;
using testing_util::Dense;
using testing_util::DensePush;

class DenseSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    proto::CreateVariablesRequest create;
    *create.mutable_optimizer() = Adam();  // two slots
    *create.add_variables() = Dense("w", {16, 8});
    *create.add_variables() = Dense("b", {8});
    ASSERT_TRUE(store_.Create(create).ok());
  }

  void PushOnce() {
    proto::PushResponse response;
    ASSERT_TRUE(store_.Push(DensePush(0, step_++, rng_), &response).ok());
  }

  // Every record read whole (a copy-on-write one through its source).
  static std::vector<common::ShardRecord> Read(std::vector<common::ShardRecord> records) {
    EXPECT_TRUE(common::MaterializeDense(&records).ok());
    return records;
  }

  static void ExpectSame(const std::vector<common::ShardRecord>& a,
                         const std::vector<common::ShardRecord>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(a[i].spec.name());
      EXPECT_EQ(a[i].version, b[i].version);
      EXPECT_EQ(a[i].values, b[i].values);
      EXPECT_EQ(a[i].slots, b[i].slots);
      EXPECT_EQ(a[i].dense, nullptr);
    }
  }

  VariableStore store_;
  std::mt19937 rng_{3};
  int64_t step_ = 0;
};

// w and b with Adam's two slots: (128 + 8) x 3 floats.
constexpr double kDenseBytes = (128 + 8) * 3 * 4;

TEST_F(DenseSnapshotTest, RecordsReadLater_HoldTheInstantsValues_WhateverCameAfter) {
  PushOnce();
  const std::vector<common::ShardRecord> copied = store_.Snapshot();
  // A budget for everything: the pushes after the instant copy each
  // variable once and go on.
  std::vector<common::ShardRecord> records = store_.Snapshot(nullptr, nullptr, 1.0);
  ASSERT_EQ(records.size(), 2u);
  for (const common::ShardRecord& r : records) {
    EXPECT_NE(r.dense, nullptr);
    EXPECT_TRUE(r.values.empty());
    EXPECT_EQ(r.dense_slots, 2);
  }
  for (int i = 0; i < 3; ++i) PushOnce();
  ExpectSame(Read(std::move(records)), copied);
  // And a record is read once.
  std::vector<common::ShardRecord> again = store_.Snapshot(nullptr, nullptr, 1.0);
  std::shared_ptr<const common::ShardDenseSource> source = again[0].dense;
  ASSERT_TRUE(common::MaterializeDense(&again).ok());
  EXPECT_EQ(source->Read([](auto, const auto&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(DenseSnapshotTest, WrittenToAShardFile_ReadsBackAsACopiedSnapshot) {
  PushOnce();
  const std::vector<common::ShardRecord> copied = store_.Snapshot();
  std::vector<common::ShardRecord> records = store_.Snapshot(nullptr, nullptr, 1.0);
  PushOnce();
  const std::string path = ::testing::TempDir() + "/dense_snapshot_test.pst";
  ASSERT_TRUE(common::WriteShardFile(path, records, nullptr).ok());
  absl::StatusOr<std::vector<common::ShardRecord>> back = common::ReadShardFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(*back, copied);
}

TEST_F(DenseSnapshotTest, BudgetSpent_APushWaitsUntilTheRecordIsRead) {
  PushOnce();
  const std::vector<common::ShardRecord> copied = store_.Snapshot();
  // Room for b's copies but not w's: a push (w then b, or b then w) waits
  // at w until the writer reads it.
  std::vector<common::ShardRecord> records =
      store_.Snapshot(nullptr, nullptr, (8 * 3 * 4 + 1) / kDenseBytes);
  absl::Notification pushed;
  std::thread pusher([&] {
    PushOnce();
    pushed.Notify();
  });
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "the push did not wait for the record of w";
  const std::vector<common::ShardRecord> read = Read(std::move(records));
  pushed.WaitForNotification();
  pusher.join();
  ExpectSame(read, copied);
}

TEST_F(DenseSnapshotTest, RecordsDroppedUnread_APushWaitingGoesOn) {
  PushOnce();
  auto records = std::make_unique<std::vector<common::ShardRecord>>(
      store_.Snapshot(nullptr, nullptr, 1e-9));  // no room for any copy
  absl::Notification pushed;
  std::thread pusher([&] {
    PushOnce();
    pushed.Notify();
  });
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  records.reset();  // a failed write drops them
  pushed.WaitForNotification();
  pusher.join();
}

// A snapshot kept and never written (a WRITE that does not come): a push
// waits at most DenseSnapshotHold::kWaitForWriter, then copies past the
// budget and goes on; the record still reads its instant.
TEST_F(DenseSnapshotTest, RecordNeverRead_APushCopiesAfterTheWaitAndGoesOn) {
  PushOnce();
  const std::vector<common::ShardRecord> copied = store_.Snapshot();
  std::vector<common::ShardRecord> records = store_.Snapshot(nullptr, nullptr, 1e-9);
  const absl::Time start = absl::Now();
  PushOnce();  // on this thread: nothing reads the records meanwhile
  EXPECT_GE(absl::Now() - start, DenseSnapshotHold::kWaitForWriter);
  ExpectSame(Read(std::move(records)), copied);
}

TEST_F(DenseSnapshotTest, OlderSnapshotUnread_KeepsItsValuesThroughANewerOne) {
  PushOnce();
  const std::vector<common::ShardRecord> first_copy = store_.Snapshot();
  std::vector<common::ShardRecord> first = store_.Snapshot(nullptr, nullptr, 1e-9);
  // No push between the two: the newer snapshot makes the older one copy
  // (whatever its budget) before it holds the variables itself; the push
  // after copies them for the newer one, which has room.
  std::vector<common::ShardRecord> second = store_.Snapshot(nullptr, nullptr, 1.0);
  PushOnce();
  ExpectSame(Read(std::move(first)), first_copy);
  ExpectSame(Read(std::move(second)), first_copy);
}

TEST_F(DenseSnapshotTest, VariablesRemovedOrRestored_RecordsKeepTheInstant) {
  PushOnce();
  const std::vector<common::ShardRecord> copied = store_.Snapshot();
  std::vector<common::ShardRecord> records = store_.Snapshot(nullptr, nullptr, 1e-9);
  // A restore replaces every variable's values (and a recreate drops them):
  // the records copy first, whatever the budget.
  std::unique_ptr<VariableStore::Restorer> restorer = store_.BeginRestore();
  std::vector<common::ShardRecord> other = copied;
  for (common::ShardRecord& r : other) {
    for (float& v : r.values) v += 1;
    ASSERT_TRUE(restorer->Absorb(r).ok());
  }
  ASSERT_TRUE(restorer->Commit(store_.generation() + 1).ok());
  ExpectSame(Read(std::move(records)), copied);
}

}  // namespace
}  // namespace pst::ps
