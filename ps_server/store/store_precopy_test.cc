// A copy-on-write save copies a hash table before its instant, while pushes
// go on, and at the instant only the rows changed since (VariableStore::
// Snapshot with a copy budget). A pusher thread keeps pushing rows, old
// ones and new ones, while snapshots are taken; each snapshot must hold
// exactly the table at its instant, which its cut names (the worker's last
// row push held): every row as the pushes up to it made it, and no row a
// later push made. The copy held in memory, and spilled to a file and
// streamed from it (as a ps's saves do), each read back from the shard
// file written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_format.h"
#include "common/tensor_util.h"
#include "ps_server/store/store_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

constexpr int64_t kDim = 2;
constexpr int64_t kBatch = 512;
constexpr int64_t kFillSteps = 200;  // 102,400 rows made first
constexpr int64_t kIdSpace = kFillSteps * kBatch * 3 / 2;

// The ids push `step` (from 1) updates: the fill's first, then a spread
// over a third more ids than it made, so that pushes also make rows.
std::vector<int64_t> IdsOf(int64_t step) {
  std::vector<int64_t> ids;
  for (int64_t j = 0; j < kBatch; ++j) {
    ids.push_back(step <= kFillSteps ? (step - 1) * kBatch + j
                                     : (step * 7919 + j * 131) % kIdSpace);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// SGD at rate 1 on rows starting at zero, each push's gradient 1: a row's
// values are minus the pushes that updated it, exactly.
proto::CreateVariablesRequest Create() {
  proto::CreateVariablesRequest create;
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  proto::VariableSpec spec = testing_util::Hash("emb", kDim, 1);
  spec.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  *create.add_variables() = spec;
  return create;
}

absl::Status Push(VariableStore& store, int64_t step) {
  const std::vector<int64_t> ids = IdsOf(step);
  proto::PushRowsRequest push;
  push.set_worker_index(0);
  push.set_incarnation(100);
  push.set_step(step);
  proto::RowIds* rows = push.add_rows();
  rows->set_name("emb/part_0");
  for (int64_t id : ids) rows->add_ids(id);
  const std::vector<float> g(ids.size() * kDim, 1.0f);
  const std::vector<int64_t> shape = {static_cast<int64_t>(ids.size()), kDim};
  common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push.add_gradients());
  proto::PushRowsResponse response;
  return store.PushRows(push, &response);
}

class StorePrecopyTest : public ::testing::TestWithParam<bool> {};  // spilled

TEST_P(StorePrecopyTest, SnapshotsDuringPushes_HoldExactlyTheirInstant) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/store_precopy_test_", getpid(), "_",
                                       GetParam() ? "spilled" : "held");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  VariableStore store;
  ASSERT_TRUE(store.Create(Create()).ok());
  for (int64_t step = 1; step <= kFillSteps; ++step) ASSERT_TRUE(Push(store, step).ok());

  absl::Mutex mu;
  int64_t pushed = kFillSteps;  // the last step pushed
  bool stop = false;
  absl::Status pusher_status;
  std::thread pusher([&] {
    for (int64_t step = kFillSteps + 1;; ++step) {
      absl::Status s = Push(store, step);
      absl::MutexLock lock(&mu);
      if (!s.ok()) pusher_status = s;
      pushed = step;
      if (stop || !s.ok()) return;
    }
  });

  int64_t during = 0;  // pushes applied between a snapshot's start and its instant
  for (int round = 0; round < 3; ++round) {
    int64_t before = 0;
    {
      // Let the pusher get going again between snapshots.
      absl::MutexLock lock(&mu);
      std::pair<const int64_t*, int64_t> reached = {&pushed, pushed + 5};
      mu.Await(absl::Condition(
          +[](std::pair<const int64_t*, int64_t>* r) { return *r->first >= r->second; }, &reached));
      before = pushed;
    }
    VariableStore::Cut cut;
    absl::Duration held;
    std::vector<common::ShardRecord> snapshot = store.Snapshot(
        &held, &cut, /*copy_budget=*/0.25, nullptr, GetParam() ? dir : std::string());
    ASSERT_TRUE(cut.error.ok()) << cut.error;
    ASSERT_EQ(snapshot.size(), 1u);
    EXPECT_EQ(snapshot[0].stream != nullptr, GetParam());
    const std::string path = dir + "/shard-0-of-1.pst";
    ASSERT_TRUE(common::WriteShardFile(path, snapshot, nullptr).ok());
    snapshot.clear();  // the spill file goes with it
    absl::StatusOr<std::vector<common::ShardRecord>> records = common::ReadShardFile(path);
    ASSERT_TRUE(records.ok()) << records.status();
    ASSERT_EQ(records->size(), 1u);
    ASSERT_FALSE(cut.workers.empty());
    const int64_t instant = cut.workers[0].rows_step();
    ASSERT_GE(instant, before);
    during += instant - before;

    std::map<int64_t, int> updates;  // id -> pushes up to the instant
    for (int64_t step = 1; step <= instant; ++step) {
      for (int64_t id : IdsOf(step)) ++updates[id];
    }
    const common::ShardRecord& r = (*records)[0];
    EXPECT_TRUE(r.row_last.empty()) << "an unbounded table's rows have no entries";
    ASSERT_EQ(r.rows, static_cast<int64_t>(updates.size())) << "round " << round;
    std::map<int64_t, float> got;
    for (int64_t k = 0; k < r.rows; ++k) {
      EXPECT_EQ(r.values[k * kDim], r.values[k * kDim + 1]);
      got[r.hash_ids[k]] = r.values[k * kDim];
    }
    int wrong = 0;
    for (const auto& [id, n] : updates) {
      auto it = got.find(id);
      if (it == got.end() || it->second != -static_cast<float>(n)) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "round " << round << ": rows not as at the instant (step " << instant
                        << ")";
  }
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  pusher.join();
  EXPECT_TRUE(pusher_status.ok()) << pusher_status;
  // Not a condition of the test (the scheduler decides), a sign that it
  // tested what it means to: pushes landed while the table was copied.
  std::printf("pushes applied during the three snapshots' copies: %lld\n",
              static_cast<long long>(during));
  // The spill files went with their snapshots: only the shard is left.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "shard-0-of-1.pst");
  }
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Copies, StorePrecopyTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Spilled" : "Held"; });

}  // namespace
}  // namespace pst::ps
