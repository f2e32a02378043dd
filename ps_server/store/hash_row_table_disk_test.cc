// HashRowTable (hash_row_table.h) with a disk tier (UseDisk): rows the
// capacity pushes out go to disk and come back bit-identical with their
// slots and index entries; reads read them there without moving them; both
// tiers are one table to ForEachRow, Replace and LoadRow; and a bounded
// table with a disk tier holds, after any pushes, what an unbounded one
// holds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/hash_row_table.h"

namespace pst::ps {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDim = 2;

// Rows of 2 values (id, id + 0.5) and 1 slot starting at 0.25.
HashRowTable::RowInit Init() {
  return [](int64_t id, std::span<float> out) {
    out[0] = static_cast<float>(id);
    out[1] = static_cast<float>(id) + 0.5f;
  };
}

HashRowTable::Limits Bounded(int64_t capacity, const char* eviction) {
  HashRowTable::Limits limits;
  limits.policy = common::ParseTablePolicy(capacity, eviction, "t").value();
  return limits;
}

// An update as a push makes it: a row's values and its slot change.
void Update(float* row, float g) {
  row[0] -= 0.1f * g;
  row[1] += 0.01f * g * g;
  row[2] += g * g;  // the slot
  row[3] += 1.0f;
}

// One push as Variable::ApplyRows makes it: the rows on disk read at once,
// each row touched and updated by its gradient, then the evictions written.
void Push(HashRowTable& table, int64_t t, const std::vector<int64_t>& ids,
          const std::vector<float>& grads) {
  table.Expire(t);
  table.Prefetch(ids);
  for (size_t k = 0; k < ids.size(); ++k) {
    if (float* row = table.Touch(ids[k], t)) Update(row, grads[k]);
  }
  EXPECT_TRUE(table.FlushEvictions());
}

// Every row of both tiers, by id, with its entry's last update and count.
struct Held {
  std::vector<float> row;
  int64_t last = -1;
  double count = -1;
  bool operator==(const Held& o) const {
    return row.size() == o.row.size() &&
           std::memcmp(row.data(), o.row.data(), row.size() * sizeof(float)) == 0;
  }
};
std::map<int64_t, Held> AllRows(const HashRowTable& table, int64_t now) {
  std::map<int64_t, Held> all;
  absl::Status s = table.ForEachRow(
      now, [&](int64_t id, std::span<const float> row, const EvictionIndex::Entry* e) {
        EXPECT_FALSE(all.contains(id)) << "id " << id << " in both tiers";
        all[id] = {std::vector<float>(row.begin(), row.end()), e == nullptr ? -1 : e->last,
                   e == nullptr ? -1 : e->count};
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  return all;
}

class HashRowTableDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/hash_row_table_disk_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    DiskTier::Options options;
    options.block_cache_bytes = 4 << 20;
    options.write_buffer_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(dir_, options);
    ASSERT_TRUE(tier.ok()) << tier.status();
    tier_ = *std::move(tier);
  }
  void TearDown() override {
    tier_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<HashRowTable> MakeTable(HashRowTable::Limits limits, bool disk = true) {
    auto table = std::make_unique<HashRowTable>(limits, kDim, std::vector<float>{0.25f}, Init());
    if (disk) {
      absl::Status s = table->UseDisk(tier_.get(), "emb");
      EXPECT_TRUE(s.ok()) << s;
    }
    return table;
  }

  std::string dir_;
  std::shared_ptr<DiskTier> tier_;
};

TEST_F(HashRowTableDiskTest, EvictedRow_GoesToDisk_AndAPushBringsItBackBitIdentical) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(2, "lfu:8"));
  ASSERT_TRUE(table->has_disk());
  float* row = table->Touch(1, 1);
  Update(row, 0.3f);
  Update(table->Touch(1, 2), -1.7f);  // row 1: two updates, lfu's count 2-ish
  const std::vector<float> before(row, row + table->width());
  const EvictionIndex::Entry entry_before = *table->IndexEntry(1);
  table->Touch(2, 3);
  table->Touch(2, 4);
  table->Touch(2, 5);
  table->Touch(3, 6);  // full: the least valued row, 1, goes to disk
  ASSERT_EQ(table->Find(1), nullptr);
  EXPECT_EQ(table->size(), 2);
  EXPECT_EQ(table->rows_on_disk(), 1);
  EXPECT_EQ(table->disk_writes(), 1);
  EXPECT_EQ(table->evictions(), 1);
  // A read reads it there and leaves it there.
  std::vector<float> read(kDim);
  ASSERT_TRUE(table->ReadStored(1, 6, read));
  EXPECT_EQ(read, std::vector<float>(before.begin(), before.begin() + kDim));
  EXPECT_EQ(table->Find(1), nullptr);
  EXPECT_EQ(table->rows_on_disk(), 1);
  // A push brings it back exactly as it left, and its count goes on.
  row = table->Touch(1, 7);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(std::memcmp(row, before.data(), before.size() * sizeof(float)), 0);
  EXPECT_EQ(table->admissions(), 3) << "a row back from disk is not a new admission";
  const EvictionIndex::Entry* entry = table->IndexEntry(1);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->last, 7);
  EXPECT_GT(entry->count, entry_before.count) << "its decayed count went on from disk's";
  EXPECT_EQ(table->size(), 2);  // made room: another row went down
  EXPECT_EQ(table->rows_on_disk(), 1);
  EXPECT_EQ(table->disk_reads(), 2);
}

TEST_F(HashRowTableDiskTest, ReadStored_IdInNeitherTier_IsFalse_AndNothingMoves) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(1, "lru"));
  table->Touch(1, 1);
  std::vector<float> out(kDim);
  EXPECT_FALSE(table->ReadStored(99, 1, out));
  EXPECT_EQ(table->size(), 1);
  EXPECT_EQ(table->rows_on_disk(), 0);
}

TEST_F(HashRowTableDiskTest, NoCapacity_UsesNoDisk) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(0, "ttl:5"));
  EXPECT_FALSE(table->has_disk());
  std::unique_ptr<HashRowTable> unbounded = MakeTable({});
  EXPECT_FALSE(unbounded->has_disk());
}

TEST_F(HashRowTableDiskTest, TwoTablesOfOneName_KeepTheirRowsApart) {
  std::unique_ptr<HashRowTable> a = MakeTable(Bounded(1, "lru"));
  std::unique_ptr<HashRowTable> b = MakeTable(Bounded(1, "lru"));
  Update(a->Touch(5, 1), 2.0f);
  a->Touch(6, 2);  // 5 to a's disk
  b->Touch(5, 1);
  b->Touch(6, 2);  // 5, not updated, to b's
  std::vector<float> from_a(kDim), from_b(kDim);
  ASSERT_TRUE(a->ReadStored(5, 2, from_a));
  ASSERT_TRUE(b->ReadStored(5, 2, from_b));
  EXPECT_NE(from_a, from_b);
  EXPECT_EQ(from_b, (std::vector<float>{5, 5.5f}));
}

TEST_F(HashRowTableDiskTest, Ttl_StaleRowsOnDisk_AreGoneToReadsSavesAndPushes) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(1, "ttl:3"));
  Update(table->Touch(1, 1), 1.0f);
  table->Touch(2, 2);  // 1 to disk, last updated at 1
  std::vector<float> out(kDim);
  EXPECT_TRUE(table->ReadStored(1, 4, out)) << "1 >= 4 - 3: not stale yet";
  EXPECT_FALSE(table->ReadStored(1, 5, out)) << "stale at 5";
  EXPECT_EQ(AllRows(*table, 4).count(1), 1u);
  EXPECT_EQ(AllRows(*table, 5).count(1), 0u);
  // A push at 5 finds it stale: the row starts again from its initializer.
  float* row = table->Touch(1, 5);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(std::vector<float>(row, row + table->width()),
            (std::vector<float>{1, 1.5f, 0.25f, 0.25f}));
}

TEST_F(HashRowTableDiskTest, Replace_EmptiesTheDisk_ThenMovesThePolicysFirstRowsThere) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(2, "lru"));
  for (int64_t id = 100; id < 110; ++id) table->Touch(id, id);
  ASSERT_EQ(table->rows_on_disk(), 8);
  HashRowTable::Rows rows;
  for (int64_t id = 0; id < 5; ++id) rows[id] = {static_cast<float>(id), 0, 1, 2};
  ASSERT_TRUE(table->Replace(std::move(rows), /*version=*/3).ok());
  EXPECT_EQ(table->size(), 2);
  EXPECT_EQ(table->rows_on_disk(), 3);
  std::map<int64_t, Held> all = AllRows(*table, 3);
  ASSERT_EQ(all.size(), 5u) << "the old rows on disk are gone, the new all held";
  for (int64_t id = 0; id < 5; ++id) {
    EXPECT_EQ(all[id].row, (std::vector<float>{static_cast<float>(id), 0, 1, 2}));
    EXPECT_EQ(all[id].last, 3);
  }
}

TEST_F(HashRowTableDiskTest, LoadRow_PastTheCapacity_MovesRowsToDisk_WithTheirEntries) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(2, "lru"));
  for (int64_t id = 0; id < 6; ++id) {
    const std::vector<float> row = {static_cast<float>(id), 1, 2, 3};
    table->LoadRow(id, reinterpret_cast<const char*>(row.data()), {10 + id, 1.0, 0.0});
  }
  EXPECT_EQ(table->size(), 2);
  EXPECT_EQ(table->rows_on_disk(), 4);
  std::map<int64_t, Held> all = AllRows(*table, 20);
  ASSERT_EQ(all.size(), 6u);
  for (int64_t id = 0; id < 6; ++id) EXPECT_EQ(all[id].last, 10 + id) << id;
  EXPECT_NE(table->Find(4), nullptr) << "the latest updated stay in memory";
  EXPECT_NE(table->Find(5), nullptr);
}

// The "nothing is lost": the same pushes, over a skewed id stream,
// into a table with a quarter of the rows in memory and the rest on disk,
// and into an unbounded one, leave both with the same rows, bit for bit.
TEST_F(HashRowTableDiskTest, SamePushes_QuarterInMemory_EqualsUnbounded) {
  for (const char* eviction : {"lru", "lfu:50", "ttl:400"}) {
    SCOPED_TRACE(eviction);
    HashRowTable::Limits unbounded_limits;
    if (std::string(eviction).rfind("ttl", 0) == 0) unbounded_limits = Bounded(0, eviction);
    std::unique_ptr<HashRowTable> memory = MakeTable(unbounded_limits, /*disk=*/false);
    std::unique_ptr<HashRowTable> tiered = MakeTable(Bounded(50, eviction));
    std::mt19937_64 rng(7);
    std::geometric_distribution<int64_t> ids(0.01);  // ~200 distinct, skewed
    std::normal_distribution<float> grads;
    int64_t t = 0;
    for (int push = 0; push < 600; ++push) {
      ++t;
      // Pushes of 8 distinct ids: with a capacity of 50, 3 evictions wait
      // for each write, and a row may leave and come back in one push.
      std::vector<int64_t> push_ids;
      while (push_ids.size() < 8) {
        const int64_t id = ids(rng);
        if (std::find(push_ids.begin(), push_ids.end(), id) == push_ids.end()) {
          push_ids.push_back(id);
        }
      }
      std::vector<float> push_grads;
      for (size_t k = 0; k < push_ids.size(); ++k) push_grads.push_back(grads(rng));
      Push(*memory, t, push_ids, push_grads);
      Push(*tiered, t, push_ids, push_grads);
    }
    EXPECT_LE(tiered->size(), 50);
    EXPECT_GT(tiered->rows_on_disk(), 50);
    EXPECT_GT(tiered->disk_reads(), 0);
    std::map<int64_t, Held> in_memory = AllRows(*memory, t);
    std::map<int64_t, Held> in_tiers = AllRows(*tiered, t);
    ASSERT_EQ(in_memory.size(), in_tiers.size());
    for (const auto& [id, held] : in_memory) {
      ASSERT_TRUE(in_tiers.contains(id)) << id;
      EXPECT_TRUE(in_tiers[id] == held) << "row " << id << " differs";
    }
  }
}

// Rows a save's stream gives, by id, in the order it gives them.
std::map<int64_t, Held> StreamRows(const common::ShardRowStream& stream,
                                   std::vector<int64_t>* order) {
  std::map<int64_t, Held> all;
  absl::Status s = stream.ForEach(
      [&](int64_t id, std::span<const float> row, int64_t last, double count) {
        EXPECT_FALSE(all.contains(id)) << "id " << id << " twice";
        all[id] = {std::vector<float>(row.begin(), row.end()), last, count};
        order->push_back(id);
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  return all;
}

TEST_F(HashRowTableDiskTest, Cut_GivesTheRowsOfBothTiers_InIdOrder_AsOfItsInstant) {
  for (const char* eviction : {"lru", "lfu:50", "ttl:40"}) {
    SCOPED_TRACE(eviction);
    std::unique_ptr<HashRowTable> table = MakeTable(Bounded(50, eviction));
    std::mt19937_64 rng(11);
    std::geometric_distribution<int64_t> ids(0.01);
    int64_t t = 0;
    auto pushes = [&](int n) {
      for (int push = 0; push < n; ++push) {
        std::vector<int64_t> push_ids;
        for (int k = 0; k < 4; ++k) push_ids.push_back(ids(rng) - 20);
        Push(*table, ++t, push_ids, std::vector<float>(push_ids.size(), 0.5f));
      }
    };
    pushes(400);
    ASSERT_GT(table->rows_on_disk(), 50);
    const std::map<int64_t, Held> before = AllRows(*table, t);
    absl::StatusOr<std::unique_ptr<TableCut>> cut = table->Cut(t, tier_);
    ASSERT_TRUE(cut.ok()) << cut.status();
    // Training goes on: rows move between the tiers and change.
    pushes(200);
    ASSERT_NE(AllRows(*table, t), before);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<int64_t> order;
      const std::map<int64_t, Held> got = StreamRows(**cut, &order);
      EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
      EXPECT_EQ((*cut)->Count().value(), static_cast<int64_t>(before.size()));
      ASSERT_EQ(got.size(), before.size());
      for (const auto& [id, held] : before) {
        ASSERT_TRUE(got.contains(id)) << id;
        const Held& g = got.at(id);
        EXPECT_TRUE(g == held) << "row " << id << " differs";
        EXPECT_EQ(g.last, held.last) << id;
        EXPECT_EQ(g.count, held.count) << id;
      }
    }
    // A Reader gives the same rows, in the same order, one at a time.
    std::vector<int64_t> read_order;
    std::unique_ptr<TableCut::Reader> r = (*cut)->Read();
    for (; r->Valid(); r->Next()) {
      read_order.push_back(r->id());
      const Held& held = before.at(r->id());
      EXPECT_TRUE((Held{std::vector<float>(r->row().begin(), r->row().end()), 0, 0}) == held);
      EXPECT_EQ(r->last(), held.last);
      EXPECT_EQ(r->count(), held.count);
    }
    EXPECT_TRUE(r->status().ok()) << r->status();
    std::vector<int64_t> order;
    StreamRows(**cut, &order);
    EXPECT_EQ(read_order, order);
  }
}

TEST_F(HashRowTableDiskTest, Cut_OfATableWithoutItsTier_IsRefused) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(5, "lru"), /*disk=*/false);
  EXPECT_EQ(table->Cut(1, tier_).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A push's evictions wait in memory and go to disk in one write; a row
// evicted and touched again in the same push comes back without the disk.
TEST_F(HashRowTableDiskTest, Push_EvictionsWaitForOneWrite_ARowTouchedAgainComesBackWithoutTheDisk) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(64, "lru"));  // 4 wait at most
  for (int64_t id = 0; id < 64; ++id) Push(*table, id + 1, {id}, {1.0f});
  ASSERT_EQ(table->rows_on_disk(), 0);
  const std::map<int64_t, Held> before = AllRows(*table, 64);
  const DiskTier::Figures tier_before = tier_->figures();
  table->Prefetch(std::vector<int64_t>{100, 0, 101});
  table->Touch(100, 65);  // row 0, the least recent, leaves
  EXPECT_EQ(table->size(), 64);
  // Out of the index, not written yet: a save would miss it, and is refused.
  EXPECT_EQ(table->IndexEntry(0), nullptr);
  EXPECT_EQ(table->ForEachRow(65, [](int64_t, std::span<const float>,
                                     const EvictionIndex::Entry*) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kFailedPrecondition);
  float* row = table->Touch(0, 65);  // back from among the leaving; row 1 leaves
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(std::vector<float>(row, row + 4), before.at(0).row);
  table->Touch(101, 65);  // row 2 leaves
  EXPECT_EQ(tier_->figures().writes, tier_before.writes) << "nothing written before the flush";
  EXPECT_EQ(tier_->figures().reads, tier_before.reads) << "no row of this push was on disk";
  ASSERT_TRUE(table->FlushEvictions());
  EXPECT_EQ(tier_->figures().writes - tier_before.writes, 2) << "rows 1 and 2, in one batch";
  EXPECT_EQ(table->rows_on_disk(), 2);
  EXPECT_EQ(table->evictions(), 3);
  EXPECT_EQ(table->size(), 64);
  const std::map<int64_t, Held> after = AllRows(*table, 65);
  ASSERT_EQ(after.size(), 66u);
  for (int64_t id : {1, 2}) EXPECT_TRUE(after.at(id) == before.at(id)) << id;
  EXPECT_EQ(after.at(1).last, 2);
  EXPECT_EQ(after.at(0).last, 65);
}

// Prefetch reads a push's rows on disk in one lookup; the Touches that
// follow take them from there, bit-identical, and read nothing more.
TEST_F(HashRowTableDiskTest, Prefetch_ReadsThePushsRowsOnDiskOnce_TouchesTakeThemBitIdentical) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(32, "lru"));  // 2 wait at most
  for (int64_t id = 0; id < 48; ++id) Push(*table, id + 1, {id}, {static_cast<float>(id)});
  ASSERT_EQ(table->rows_on_disk(), 16);  // 0..15
  const std::map<int64_t, Held> before = AllRows(*table, 48);
  const std::vector<int64_t> ids = {3, 40, 7, 500, 11};  // 3 on disk, 1 in memory, 1 new
  const int64_t reads_before = tier_->figures().reads;
  table->Prefetch(ids);
  EXPECT_EQ(tier_->figures().reads - reads_before, 3);
  for (int64_t id : {3, 7, 11}) {
    float* row = table->Touch(id, 49);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(std::vector<float>(row, row + 4), before.at(id).row) << id;
  }
  EXPECT_EQ(tier_->figures().reads - reads_before, 3) << "taken from the prefetch";
  EXPECT_EQ(table->disk_reads(), 3);
  ASSERT_TRUE(table->FlushEvictions());
  EXPECT_EQ(AllRows(*table, 49).size(), 48u);
}

// ReadFromDisk reads the rows on disk among many ids in one lookup, and
// leaves the others to the caller.
TEST_F(HashRowTableDiskTest, ReadFromDisk_ReadsOnlyTheRowsOnDisk_AsReadStoredDoes) {
  std::unique_ptr<HashRowTable> table = MakeTable(Bounded(32, "lru"));
  for (int64_t id = 0; id < 40; ++id) Push(*table, id + 1, {id}, {0.5f});
  const std::vector<int64_t> ids = {39, 2, 900, 5, 20};  // memory, disk, neither, disk, memory
  std::vector<float> out(ids.size() * kDim, -1.0f);
  std::vector<char> read;
  table->ReadFromDisk(ids, 40, out.data(), &read);
  EXPECT_EQ(read, (std::vector<char>{0, 1, 0, 1, 0}));
  for (size_t i : {1, 3}) {
    std::vector<float> want(kDim);
    ASSERT_TRUE(table->ReadStored(ids[i], 40, want));
    EXPECT_EQ(std::vector<float>(out.begin() + i * kDim, out.begin() + (i + 1) * kDim), want);
  }
  EXPECT_EQ(out[0], -1.0f) << "rows in memory are the caller's";
  EXPECT_EQ(table->rows_on_disk(), 8) << "reads move nothing";
}

}  // namespace
}  // namespace pst::ps
