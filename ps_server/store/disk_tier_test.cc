#include "ps_server/store/disk_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"

namespace pst::ps {
namespace {

namespace fs = std::filesystem;

// Bit-exact row equality (NaNs and signed zeros included).
bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> RowOf(int64_t id, int64_t width) {
  std::vector<float> row(width);
  for (int64_t i = 0; i < width; ++i) row[i] = static_cast<float>(id) * 0.5f + i * 1e-3f;
  return row;
}

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/disk_tier_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<DiskTier> OpenTier(bool wipe = true) {
    DiskTier::Options options;
    options.block_cache_bytes = 8 << 20;
    options.wipe_on_open = wipe;
    absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(dir_, options);
    EXPECT_TRUE(tier.ok()) << tier.status();
    return tier.ok() ? std::move(*tier) : nullptr;
  }

  std::string dir_;
};

TEST_F(DiskTierTest, PutThenTake_RowComesBackBitIdentical_AndLeavesDisk) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  ASSERT_NE(tier, nullptr);
  // Values then two slots, with the bits a float can hold.
  std::vector<float> row = {1.5f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            3e38f};
  DiskTier::TableHandle t = tier->Table("emb", 6).value();
  ASSERT_TRUE(tier->Put(t, 42, row, int64_t{1} << 40, 2.718281828459045).ok());
  EXPECT_EQ(tier->Count(t), 1);

  std::vector<float> out(6);
  int64_t last = 0;
  double count = 0;
  ASSERT_TRUE(tier->Get(t, 42, out, &last, &count).value());
  EXPECT_TRUE(SameBits(out, row));
  EXPECT_EQ(last, int64_t{1} << 40);
  EXPECT_EQ(count, 2.718281828459045);
  EXPECT_EQ(tier->Count(t), 1);  // Get leaves it

  std::fill(out.begin(), out.end(), 0.0f);
  ASSERT_TRUE(tier->Take(t, 42, out, &last, &count).value());
  EXPECT_TRUE(SameBits(out, row));
  EXPECT_EQ(tier->Count(t), 0);  // Take removes it
  EXPECT_FALSE(tier->Take(t, 42, out, &last, &count).value());
  EXPECT_FALSE(tier->Get(t, 42, out, &last, &count).value());

  DiskTier::Figures f = tier->figures();
  EXPECT_EQ(f.writes, 1);
  EXPECT_EQ(f.reads, 4);
  EXPECT_GT(f.bytes_written, 6 * 4);
}

TEST_F(DiskTierTest, Put_ReplacingARow_CountStaysExact) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  DiskTier::TableHandle t = tier->Table("emb", 2).value();
  ASSERT_TRUE(tier->Put(t, 1, RowOf(1, 2), 1, 1).ok());
  ASSERT_TRUE(tier->Put(t, 1, RowOf(7, 2), 2, 2).ok());
  const std::vector<float> first = RowOf(1, 2);  // a Row only points at its values
  std::vector<DiskTier::Row> rows = {{1, first, 3, 3}};
  std::vector<std::vector<float>> values;
  for (int64_t id = 2; id <= 5; ++id) values.push_back(RowOf(id, 2));
  for (int64_t id = 2; id <= 5; ++id) rows.push_back({id, values[id - 2], id, 0});
  ASSERT_TRUE(tier->PutBatch(t, rows).ok());
  EXPECT_EQ(tier->Count(t), 5);
  std::vector<float> out(2);
  int64_t last;
  double count;
  ASSERT_TRUE(tier->Get(t, 1, out, &last, &count).value());
  EXPECT_EQ(last, 3);
}

TEST_F(DiskTierTest, PutBatch_BadRowOrIdTwice_InvalidArgumentNothingWritten) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  DiskTier::TableHandle t = tier->Table("emb", 3).value();
  std::vector<float> good = RowOf(1, 3), short_row = RowOf(1, 2);
  std::vector<DiskTier::Row> twice = {{1, good, 0, 0}, {1, good, 0, 0}};
  EXPECT_EQ(tier->PutBatch(t, twice).code(), absl::StatusCode::kInvalidArgument);
  std::vector<DiskTier::Row> bad = {{1, good, 0, 0}, {2, short_row, 0, 0}};
  EXPECT_EQ(tier->PutBatch(t, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Count(t), 0);
  std::vector<float> out(2);
  int64_t last;
  double count;
  EXPECT_EQ(tier->Get(t, 1, out, &last, &count).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Table("emb", 4).status().code(), absl::StatusCode::kInvalidArgument);
}

// GetBatch reads what Get reads, row for row, whether the rows sit in the
// memtable or in files (the smallest write buffer allowed flushes most of
// them; RocksDB aborted making memtables that small before their buckets
// were sized to them).
TEST_F(DiskTierTest, GetBatch_GivesWhatGetGives_RowForRow) {
  DiskTier::Options options;
  options.write_buffer_bytes = 64 << 10;
  std::unique_ptr<DiskTier> tier = DiskTier::Open(dir_, options).value();
  DiskTier::TableHandle t = tier->Table("emb", 8).value();
  for (int64_t id = -500; id < 1500; id += 2) {
    ASSERT_TRUE(tier->Put(t, id, RowOf(id, 8), id * 3, 0.5 * static_cast<double>(id)).ok());
  }
  std::vector<int64_t> ids;
  for (int64_t id = 1600; id >= -600; id -= 3) ids.push_back(id);  // present or not, any order
  std::vector<float> rows(ids.size() * 8, -1.0f);
  std::vector<DiskTier::Got> got(ids.size());
  const int64_t reads = tier->figures().reads;
  ASSERT_TRUE(tier->GetBatch(t, ids, rows, got).ok());
  EXPECT_EQ(tier->figures().reads - reads, static_cast<int64_t>(ids.size()));
  int found = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> one(8);
    int64_t last = 0;
    double count = 0;
    const bool has = tier->Get(t, ids[i], one, &last, &count).value();
    ASSERT_TRUE(got[i].status.ok()) << got[i].status;
    ASSERT_EQ(got[i].found, has) << ids[i];
    if (!has) continue;
    ++found;
    EXPECT_TRUE(SameBits(std::span<const float>(rows).subspan(i * 8, 8), one)) << ids[i];
    EXPECT_EQ(got[i].last, last);
    EXPECT_EQ(got[i].count, count);
  }
  EXPECT_GT(found, 300);
  // Room of the wrong size: refused, nothing read.
  std::vector<float> short_rows(ids.size() * 8 - 1);
  EXPECT_EQ(tier->GetBatch(t, ids, short_rows, got).code(), absl::StatusCode::kInvalidArgument);
  std::vector<DiskTier::Got> short_got(ids.size() - 1);
  EXPECT_EQ(tier->GetBatch(t, ids, rows, short_got).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DiskTierTest, TwoTables_DoNotMix_NamesAreArbitraryBytes) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  const std::string odd("a/b\0[x]\n\xff", 10);
  DiskTier::TableHandle a = tier->Table("emb", 2).value();
  DiskTier::TableHandle b = tier->Table(odd, 4).value();
  ASSERT_TRUE(tier->Put(a, 7, RowOf(7, 2), 1, 1).ok());
  ASSERT_TRUE(tier->Put(b, 8, RowOf(8, 4), 1, 1).ok());
  EXPECT_EQ(tier->Count(a), 1);
  EXPECT_EQ(tier->Count(b), 1);
  std::vector<float> out2(2), out4(4);
  int64_t last;
  double count;
  EXPECT_FALSE(tier->Get(a, 8, out2, &last, &count).value());
  EXPECT_FALSE(tier->Get(b, 7, out4, &last, &count).value());
  ASSERT_TRUE(tier->Get(b, 8, out4, &last, &count).value());
  EXPECT_TRUE(SameBits(out4, RowOf(8, 4)));

  ASSERT_TRUE(tier->Clear(a).ok());
  EXPECT_EQ(tier->Count(a), 0);
  EXPECT_FALSE(tier->Get(a, 7, out2, &last, &count).value());
  EXPECT_TRUE(tier->Get(b, 8, out4, &last, &count).value());
  ASSERT_TRUE(tier->Put(a, 9, RowOf(9, 2), 1, 1).ok());  // usable after Clear
  EXPECT_EQ(tier->Count(a), 1);
}

TEST_F(DiskTierTest, ForEach_IdOrderOverASnapshot_WhileWritesGoOn) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  DiskTier::TableHandle t = tier->Table("emb", 3).value();
  const std::vector<int64_t> ids = {5, -3, 0, int64_t{1} << 62, -(int64_t{1} << 62), 17, 2};
  for (int64_t id : ids) ASSERT_TRUE(tier->Put(t, id, RowOf(id, 3), id, 0.5).ok());

  std::vector<int64_t> seen;
  bool wrote = false;
  ASSERT_TRUE(
      tier->ForEach(t,
                    [&](int64_t id, std::span<const float> row, int64_t last, double count) {
                      if (!wrote) {  // writes while the scan is under way
                        wrote = true;
                        std::vector<float> out(3);
                        int64_t l;
                        double c;
                        EXPECT_TRUE(tier->Take(t, 17, out, &l, &c).value());
                        EXPECT_TRUE(tier->Put(t, 3, RowOf(3, 3), 3, 0).ok());
                        EXPECT_TRUE(tier->Put(t, 5, RowOf(99, 3), 9, 0).ok());
                      }
                      seen.push_back(id);
                      EXPECT_TRUE(SameBits(row, RowOf(id, 3))) << id;
                      EXPECT_EQ(last, id);
                      EXPECT_EQ(count, 0.5);
                      return absl::OkStatus();
                    })
          .ok());
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(seen, sorted);
  EXPECT_EQ(tier->Count(t), static_cast<int64_t>(ids.size()));  // -17, +3

  // A concurrent writer: each scan sees the rows of one moment.
  constexpr int64_t kWriter = 1'000'000;  // its ids, from here up (below 2^62)
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::vector<float> out(3);
    // Bounded: a scan of the hash memtable sorts every entry in it.
    for (int64_t i = 0; !stop.load() && i < 20'000; ++i) {
      int64_t l;
      double c;
      ASSERT_TRUE(tier->Put(t, kWriter + i, RowOf(kWriter + i, 3), 0, 0.5).ok());
      ASSERT_TRUE(tier->Take(t, kWriter + i, out, &l, &c).ok());
    }
  });
  for (int scan = 0; scan < 50; ++scan) {
    int64_t rows = 0, writer_rows = 0;
    int64_t previous = std::numeric_limits<int64_t>::min();
    ASSERT_TRUE(tier->ForEach(t,
                              [&](int64_t id, std::span<const float>, int64_t, double) {
                                EXPECT_GT(id, previous);
                                previous = id;
                                ++rows;
                                writer_rows += id >= kWriter && id < (int64_t{1} << 62);
                                return absl::OkStatus();
                              })
                    .ok());
    EXPECT_LE(writer_rows, 1);  // its row of the moment, or none
    EXPECT_EQ(rows - writer_rows, static_cast<int64_t>(ids.size()));
  }
  stop = true;
  writer.join();
}

// Every row a cursor gives, in its order, with its entry.
struct Scanned {
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> rows;
  std::vector<int64_t> lasts;
};
Scanned ScanAll(const DiskTier::View& view) {
  Scanned out;
  std::unique_ptr<DiskTier::Cursor> c = view.Scan();
  for (; c->Valid(); c->Next()) {
    out.ids.push_back(c->id());
    out.rows.emplace_back(c->row().begin(), c->row().end());
    out.lasts.push_back(c->last());
  }
  EXPECT_TRUE(c->status().ok()) << c->status();
  return out;
}

TEST_F(DiskTierTest, Pin_ViewKeepsItsInstant_ThroughWritesAndClear) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  DiskTier::TableHandle t = tier->Table("emb", 2).value();
  for (int64_t id : {4, -9, 7}) ASSERT_TRUE(tier->Put(t, id, RowOf(id, 2), id, 1).ok());
  absl::StatusOr<std::unique_ptr<DiskTier::View>> view = tier->Pin(t);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE(tier->Put(t, 4, RowOf(40, 2), 0, 0).ok());
  ASSERT_TRUE(tier->Put(t, 5, RowOf(5, 2), 0, 0).ok());
  // Scanned twice, once after the table was cleared and written again.
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass);
    const Scanned got = ScanAll(**view);
    EXPECT_EQ(got.ids, (std::vector<int64_t>{-9, 4, 7}));
    EXPECT_EQ(got.lasts, (std::vector<int64_t>{-9, 4, 7}));
    ASSERT_EQ(got.rows.size(), 3u);
    EXPECT_TRUE(SameBits(got.rows[1], RowOf(4, 2)));
    ASSERT_TRUE(tier->Clear(t).ok());
    ASSERT_TRUE(tier->Put(t, 1, RowOf(1, 2), 0, 0).ok());
  }
  EXPECT_EQ(tier->Count(t), 1);
  absl::StatusOr<std::unique_ptr<DiskTier::View>> now = tier->Pin(t);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(ScanAll(**now).ids, (std::vector<int64_t>{1}));
}

TEST_F(DiskTierTest, Scratch_SealedViewReadsWhatWasPut_InIdOrder_AndGoesWithIt) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  absl::StatusOr<std::unique_ptr<DiskTier::Scratch>> scratch = tier->NewScratch(3);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  std::vector<std::vector<float>> values;
  std::vector<DiskTier::Row> rows;
  for (int64_t id : {30, -2, 11}) values.push_back(RowOf(id, 3));
  rows.push_back({30, values[0], 300, 0.5});
  rows.push_back({-2, values[1], -20, 0.5});
  rows.push_back({11, values[2], 110, 0.5});
  ASSERT_TRUE((*scratch)->Put(rows).ok());
  const std::vector<float> narrow(2);
  DiskTier::Row bad{99, narrow, 0, 0};
  EXPECT_EQ((*scratch)->Put(std::span<const DiskTier::Row>(&bad, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  std::unique_ptr<DiskTier::View> view = (*scratch)->Seal();
  EXPECT_EQ((*scratch)->Put(rows).code(), absl::StatusCode::kFailedPrecondition);
  scratch->reset();
  const Scanned got = ScanAll(*view);
  EXPECT_EQ(got.ids, (std::vector<int64_t>{-2, 11, 30}));
  EXPECT_EQ(got.lasts, (std::vector<int64_t>{-20, 110, 300}));
  ASSERT_EQ(got.rows.size(), 3u);
  EXPECT_TRUE(SameBits(got.rows[0], RowOf(-2, 3)));

  // Its column family goes with the view: none is left behind.
  auto families = [&] {
    std::vector<std::string> names;
    EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir_, &names).ok());
    return names.size();
  };
  const size_t with = families();
  view.reset();
  EXPECT_EQ(families(), with - 1);
}

TEST_F(DiskTierTest, ForEach_ErrorOfFn_StopsAndReturnsIt) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  DiskTier::TableHandle t = tier->Table("emb", 1).value();
  for (int64_t id = 0; id < 10; ++id) ASSERT_TRUE(tier->Put(t, id, RowOf(id, 1), 0, 0).ok());
  int calls = 0;
  absl::Status s = tier->ForEach(t, [&](int64_t id, std::span<const float>, int64_t, double) {
    return ++calls == 3 ? absl::AbortedError("enough") : absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(calls, 3);
}

TEST_F(DiskTierTest, Reopen_WipeOnOpen_StartsEmpty_ElseKeepsRows) {
  {
    std::unique_ptr<DiskTier> tier = OpenTier();
    DiskTier::TableHandle t = tier->Table("emb", 2).value();
    for (int64_t id = 0; id < 100; ++id) ASSERT_TRUE(tier->Put(t, id, RowOf(id, 2), 0, 0).ok());
  }
  {
    std::unique_ptr<DiskTier> tier = OpenTier(/*wipe=*/false);
    DiskTier::TableHandle t = tier->Table("emb", 2).value();
    EXPECT_EQ(tier->Count(t), 100);
    std::vector<float> out(2);
    int64_t last;
    double count;
    ASSERT_TRUE(tier->Get(t, 50, out, &last, &count).value());
    EXPECT_TRUE(SameBits(out, RowOf(50, 2)));
  }
  {
    std::unique_ptr<DiskTier> tier = OpenTier(/*wipe=*/true);
    DiskTier::TableHandle t = tier->Table("emb", 2).value();
    EXPECT_EQ(tier->Count(t), 0);
    std::vector<float> out(2);
    int64_t last;
    double count;
    EXPECT_FALSE(tier->Get(t, 50, out, &last, &count).value());
  }
}

TEST_F(DiskTierTest, CorruptValue_IsDataLossNamingTableAndId_NotACrash) {
  {
    std::unique_ptr<DiskTier> tier = OpenTier();
    DiskTier::TableHandle t = tier->Table("emb", 4).value();
    for (int64_t id = 1; id <= 3; ++id) ASSERT_TRUE(tier->Put(t, id, RowOf(id, 4), 0, 0).ok());
  }
  {  // Garbage under the keys of ids 1 and 2, with RocksDB itself.
    std::vector<std::string> families;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir_, &families).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& f : families)
      descriptors.emplace_back(f, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), dir_, descriptors, &handles, &db).ok());
    rocksdb::ColumnFamilyHandle* emb = nullptr;
    for (size_t i = 0; i < families.size(); ++i) {
      if (families[i] == "t" + absl::BytesToHexString("emb")) emb = handles[i];
    }
    ASSERT_NE(emb, nullptr);
    const char key1[8] = {'\x80', 0, 0, 0, 0, 0, 0, 1};
    const char key2[8] = {'\x80', 0, 0, 0, 0, 0, 0, 2};
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), emb, rocksdb::Slice(key1, 8), "garbage").ok());
    std::string right_size(8 + 4 * 4 + 16, '\0');  // version 0
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), emb, rocksdb::Slice(key2, 8), right_size).ok());
    for (rocksdb::ColumnFamilyHandle* h : handles)
      ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    ASSERT_TRUE(db->Close().ok());
    delete db;
  }
  std::unique_ptr<DiskTier> tier = OpenTier(/*wipe=*/false);
  DiskTier::TableHandle t = tier->Table("emb", 4).value();
  std::vector<float> out(4);
  int64_t last;
  double count;
  absl::StatusOr<bool> got = tier->Take(t, 1, out, &last, &count);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("'emb' id 1"), std::string::npos) << got.status();
  got = tier->Get(t, 2, out, &last, &count);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("version 0"), std::string::npos) << got.status();
  // A batch gives each row its own outcome: the bad ones fail alone.
  std::vector<float> rows(4 * 4);
  std::vector<DiskTier::Got> batch(4);
  ASSERT_TRUE(tier->GetBatch(t, std::vector<int64_t>{1, 2, 3, 4}, rows, batch).ok());
  EXPECT_EQ(batch[0].status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(batch[1].status.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(batch[0].found || batch[1].found);
  EXPECT_TRUE(batch[2].status.ok() && batch[2].found);
  EXPECT_TRUE(SameBits(std::span<const float>(rows).subspan(8, 4), RowOf(3, 4)));
  EXPECT_TRUE(batch[3].status.ok());
  EXPECT_FALSE(batch[3].found);
  EXPECT_TRUE(tier->Take(t, 3, out, &last, &count).value());
  EXPECT_EQ(tier->ForEach(t, [](int64_t, std::span<const float>, int64_t,
                                double) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(DiskTierTest, Open_DirectoryUnderAFile_FailedPreconditionNamingIt) {
  fs::create_directories(dir_);
  const std::string file = dir_ + "/plain_file";
  std::ofstream(file) << "x";
  absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(file + "/tier", {});
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(tier.status().message().find(file + "/tier"), std::string::npos) << tier.status();
}

TEST_F(DiskTierTest, Open_DirectoryInUse_UnavailableNamingIt) {
  std::unique_ptr<DiskTier> tier = OpenTier();
  ASSERT_NE(tier, nullptr);
  absl::StatusOr<std::unique_ptr<DiskTier>> second = DiskTier::Open(dir_, {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(dir_), std::string::npos) << second.status();
}

TEST_F(DiskTierTest, HundredThousandRows_PutThenTaken_AllEqual) {
  constexpr int64_t kRows = 100'000;
  constexpr int64_t kWidth = 24;
  std::unique_ptr<DiskTier> tier = OpenTier();
  DiskTier::TableHandle t = tier->Table("emb", kWidth).value();
  // Ids spread over int64, written in bursts as eviction would.
  auto id_of = [](int64_t i) { return static_cast<int64_t>(uint64_t(i) * 0x9e3779b97f4a7c15ULL); };
  std::vector<std::vector<float>> values(1000);
  std::vector<DiskTier::Row> batch;
  for (int64_t i = 0; i < kRows; ++i) {
    values[i % 1000] = RowOf(i, kWidth);
    batch.push_back({id_of(i), values[i % 1000], i, 1.0 / (i + 1)});
    if (batch.size() == 1000) {
      ASSERT_TRUE(tier->PutBatch(t, batch).ok());
      batch.clear();
    }
  }
  EXPECT_EQ(tier->Count(t), kRows);
  std::vector<float> out(kWidth);
  for (int64_t i = 0; i < kRows; ++i) {
    int64_t last;
    double count;
    ASSERT_TRUE(tier->Take(t, id_of(i), out, &last, &count).value()) << i;
    ASSERT_TRUE(SameBits(out, RowOf(i, kWidth))) << i;
    ASSERT_EQ(last, i);
    ASSERT_EQ(count, 1.0 / (i + 1));
  }
  EXPECT_EQ(tier->Count(t), 0);
}

}  // namespace
}  // namespace pst::ps
