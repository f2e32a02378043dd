// HashRowTable (hash_row_table.h) on its own: rows made on the
// admit_after-th touch with their initial values and slots, admission
// counted in a filter of fixed size, the row limit, the
// loaders a restore and a state transfer use, and a bounded table's
// capacity and eviction.
#include "ps_server/store/hash_row_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace pst::ps {
namespace {

// Rows of 2 values (id, id + 0.5) and 1 slot starting at 0.25.
HashRowTable MakeTable(HashRowTable::Limits limits) {
  return HashRowTable(limits, /*dim=*/2, /*slot_initial_values=*/{0.25f},
                      [](int64_t id, std::span<float> out) {
                        out[0] = static_cast<float>(id);
                        out[1] = static_cast<float>(id) + 0.5f;
                      });
}

std::vector<float> RowOf(const HashRowTable& table, int64_t id) {
  const float* row = table.Find(id);
  if (row == nullptr) return {};
  return std::vector<float>(row, row + table.width());
}

TEST(HashRowTableTest, Touch_AdmitAfterOne_MakesTheRowWithItsInitialValuesAndSlots) {
  HashRowTable table = MakeTable({});
  EXPECT_EQ(table.width(), 4);
  EXPECT_EQ(table.Find(7), nullptr);
  float* row = table.Touch(7, /*t=*/1);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(RowOf(table, 7), (std::vector<float>{7, 7.5f, 0.25f, 0.25f}));
  EXPECT_EQ(table.size(), 1);
  row[0] = 100;
  EXPECT_EQ(table.Touch(7, /*t=*/1), row);  // the same row, not made again
  EXPECT_EQ(RowOf(table, 7)[0], 100);
  EXPECT_EQ(table.size(), 1);
  EXPECT_TRUE(table.ContainsAll(std::vector<int64_t>{7}));
  EXPECT_FALSE(table.ContainsAll(std::vector<int64_t>{7, 8}));
}

TEST(HashRowTableTest, Admission_MakesTheRowOnTheNthTouch_ReadsCountButMakeNone) {
  HashRowTable::Limits limits;
  limits.admit_after = 3;
  HashRowTable table = MakeTable(limits);
  EXPECT_EQ(table.admission(), nullptr) << "nothing counted, nothing allocated";
  EXPECT_FALSE(table.CountTouch(5));                 // a read: 1
  EXPECT_EQ(table.Touch(5, /*t=*/1), nullptr);       // a push: 2
  EXPECT_TRUE(table.CountTouch(5));                  // a read: 3, admitted
  EXPECT_EQ(table.size(), 0);
  ASSERT_NE(table.Touch(5, /*t=*/1), nullptr);       // the push that makes its row
  EXPECT_EQ(table.size(), 1);
  EXPECT_EQ(table.admissions(), 1);
  EXPECT_EQ(table.refused(), 1);
  std::vector<float> initial(2);
  table.InitialValues(9, initial);
  EXPECT_EQ(initial, (std::vector<float>{9, 9.5f}));
}

TEST(HashRowTableTest, Admission_ManyMoreIdsThanTheFilterHolds_NeverLate) {
  HashRowTable::Limits limits;
  limits.admit_after = 2;
  limits.admission_filter_bytes = 8 << 10;  // the smallest: 1024 counters a row
  HashRowTable table = MakeTable(limits);
  // 20000 ids touched once each: some may be admitted early (sharing bits
  // and counters), and the filter holds its size however many ids come.
  int early = 0;
  for (int64_t id = 0; id < 20000; ++id) early += table.CountTouch(id) ? 1 : 0;
  ASSERT_NE(table.admission(), nullptr);
  EXPECT_LE(table.admission()->bytes(), 8 << 10);
  EXPECT_LT(early, 20000);
  // Every id touched a second time is admitted: never late.
  for (int64_t id = 0; id < 20000; ++id) ASSERT_TRUE(table.CountTouch(id)) << id;
}

TEST(HashRowTableTest, CheckRoom_PastMaxRows_IsResourceExhaustedForNewRowsOnly) {
  HashRowTable::Limits limits;
  limits.max_rows = 2;
  HashRowTable table = MakeTable(limits);
  ASSERT_NE(table.Touch(1, /*t=*/1), nullptr);
  ASSERT_NE(table.Touch(2, /*t=*/1), nullptr);
  EXPECT_TRUE(table.CheckRoom(std::vector<int64_t>{1, 2}, "emb").ok());
  absl::Status full = table.CheckRoom(std::vector<int64_t>{2, 3}, "emb");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("'emb' holds 2 rows"), std::string::npos) << full;
}

TEST(HashRowTableTest, Loaders_ReplaceForgetsTouchCounts_LoadAddsRowsAndCounts) {
  HashRowTable::Limits limits;
  limits.admit_after = 5;
  HashRowTable table = MakeTable(limits);
  EXPECT_FALSE(table.CountTouch(3));
  HashRowTable::Rows rows;
  rows[4] = {1, 2, 3, 4};
  ASSERT_TRUE(table.Replace(std::move(rows), /*version=*/3).ok());
  EXPECT_EQ(table.size(), 1);
  EXPECT_EQ(table.admission(), nullptr) << "the counts are forgotten";
  EXPECT_EQ(RowOf(table, 4), (std::vector<float>{1, 2, 3, 4}));

  const std::vector<float> row = {5, 6, 7, 8};
  std::string bytes(sizeof(float) * row.size(), '\0');
  std::memcpy(bytes.data(), row.data(), bytes.size());
  table.LoadRow(9, bytes.data(), {});
  absl::StatusOr<AdmissionFilter> counts = AdmissionFilter::Create(8 << 10);
  ASSERT_TRUE(counts.ok());
  for (int touch = 0; touch < 4; ++touch) counts->Add(11);
  table.LoadAdmission(*std::move(counts));
  EXPECT_EQ(table.size(), 2);
  EXPECT_EQ(RowOf(table, 9), row);
  EXPECT_TRUE(table.CountTouch(11));  // its 5th touch
}

HashRowTable::Limits Bounded(int64_t capacity, const std::string& eviction) {
  HashRowTable::Limits limits;
  limits.policy = common::ParseTablePolicy(capacity, eviction, "test").value();
  return limits;
}

TEST(HashRowTableTest, Capacity_TheLeastRecentlyUpdatedRowGoes_NeverAFailedPush) {
  HashRowTable table = MakeTable(Bounded(3, "lru"));
  ASSERT_TRUE(table.bounded());
  for (int64_t id = 1; id <= 3; ++id) ASSERT_NE(table.Touch(id, /*t=*/id), nullptr);
  ASSERT_NE(table.Touch(1, 4), nullptr);  // 1 updated again: 2 is now the oldest
  const std::vector<int64_t> more = {4, 5};
  EXPECT_TRUE(table.CheckRoom(more, "emb").ok()) << "a bounded table makes room";
  ASSERT_NE(table.Touch(4, 5), nullptr);
  EXPECT_EQ(table.size(), 3);
  EXPECT_EQ(table.evictions(), 1);
  EXPECT_EQ(table.Find(2), nullptr);
  EXPECT_NE(table.Find(1), nullptr);
  ASSERT_NE(table.Touch(5, 6), nullptr);
  EXPECT_EQ(table.Find(3), nullptr);
  EXPECT_EQ(table.size(), 3);
  EXPECT_EQ(table.evictions(), 2);
}

TEST(HashRowTableTest, EvictedIdThatComesBack_StartsFromItsInitialValuesAndFreshSlots) {
  HashRowTable table = MakeTable(Bounded(1, "lru"));
  float* row = table.Touch(7, 1);
  ASSERT_NE(row, nullptr);
  row[0] = 100;  // trained
  row[2] = 9;    // its slot
  ASSERT_NE(table.Touch(8, 2), nullptr);  // 7 goes
  EXPECT_EQ(table.Find(7), nullptr);
  // 8 may be made in 7's memory: none of 7's values or slot shows through.
  EXPECT_EQ(RowOf(table, 8), (std::vector<float>{8, 8.5f, 0.25f, 0.25f}));
  ASSERT_NE(table.Touch(7, 3), nullptr);  // 8 goes, 7 is made afresh
  EXPECT_EQ(RowOf(table, 7), (std::vector<float>{7, 7.5f, 0.25f, 0.25f}));
}

TEST(HashRowTableTest, EvictedId_AdmissionRemembersIt_ItsRowStartsAfresh) {
  HashRowTable::Limits limits = Bounded(1, "lru");
  limits.admit_after = 2;
  HashRowTable table = MakeTable(limits);
  EXPECT_EQ(table.Touch(7, 1), nullptr);
  float* row = table.Touch(7, 2);
  ASSERT_NE(row, nullptr);
  row[0] = 100;
  EXPECT_EQ(table.Touch(8, 3), nullptr);
  ASSERT_NE(table.Touch(8, 4), nullptr);  // 7 goes
  EXPECT_EQ(table.Find(7), nullptr);
  ASSERT_NE(table.Touch(7, 5), nullptr) << "admitted before: back on its next touch";
  EXPECT_EQ(RowOf(table, 7), (std::vector<float>{7, 7.5f, 0.25f, 0.25f}));
}

TEST(HashRowTableTest, Lfu_TheFrequentRowStays) {
  HashRowTable table = MakeTable(Bounded(2, "lfu:1000"));
  for (int64_t t = 1; t <= 5; ++t) ASSERT_NE(table.Touch(1, t), nullptr);
  ASSERT_NE(table.Touch(2, 6), nullptr);
  ASSERT_NE(table.Touch(3, 7), nullptr);  // 2, updated once, goes; 1 stays
  EXPECT_NE(table.Find(1), nullptr);
  EXPECT_EQ(table.Find(2), nullptr);
  EXPECT_NE(table.Find(3), nullptr);
}

TEST(HashRowTableTest, Ttl_RowsNotUpdatedForTtlVersionsGo_WithoutACapacity) {
  HashRowTable table = MakeTable(Bounded(0, "ttl:3"));
  ASSERT_NE(table.Touch(1, 1), nullptr);
  ASSERT_NE(table.Touch(2, 2), nullptr);
  table.NoteUpdate(1, 3);
  table.Expire(5);  // 2 was updated at 2: alive through version 5
  EXPECT_EQ(table.size(), 2);
  EXPECT_FALSE(table.ExpiryDue(5)) << "a bound (1's first update) made exact by Expire";
  EXPECT_TRUE(table.ExpiryDue(6));
  table.Expire(6);
  EXPECT_EQ(table.Find(2), nullptr);
  EXPECT_NE(table.Find(1), nullptr);
  EXPECT_EQ(table.evictions(), 1);
  EXPECT_FALSE(table.ExpiryDue(6)) << "the bound is exact again after an expiry";
  table.Expire(7);
  EXPECT_EQ(table.size(), 0);
}

TEST(HashRowTableTest, Replace_PastTheCapacity_KeepsTheCapacity) {
  HashRowTable table = MakeTable(Bounded(2, "lru"));
  HashRowTable::Rows rows;
  for (int64_t id : {5, 3, 9}) rows[id] = {1, 2, 3, 4};
  ASSERT_TRUE(table.Replace(std::move(rows), /*version=*/10).ok());
  EXPECT_EQ(table.size(), 2);
  EXPECT_EQ(table.Find(3), nullptr) << "equal keys: the lowest id goes first";
  const EvictionIndex::Entry* e = table.IndexEntry(9);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->last, 10);
}

}  // namespace
}  // namespace pst::ps
