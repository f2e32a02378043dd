// HashRowTable (hash_row_table.h) on its own: rows made on the
// admit_after-th touch with their initial values and slots, admission
// counted exactly and then in shared counters, the row limit, and the
// loaders a restore and a state transfer use.
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
  float* row = table.Touch(7);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(RowOf(table, 7), (std::vector<float>{7, 7.5f, 0.25f, 0.25f}));
  EXPECT_EQ(table.size(), 1);
  row[0] = 100;
  EXPECT_EQ(table.Touch(7), row);  // the same row, not made again
  EXPECT_EQ(RowOf(table, 7)[0], 100);
  EXPECT_EQ(table.size(), 1);
  EXPECT_TRUE(table.ContainsAll(std::vector<int64_t>{7}));
  EXPECT_FALSE(table.ContainsAll(std::vector<int64_t>{7, 8}));
}

TEST(HashRowTableTest, Admission_MakesTheRowOnTheNthTouch_ReadsCountButMakeNone) {
  HashRowTable::Limits limits;
  limits.admit_after = 3;
  HashRowTable table = MakeTable(limits);
  EXPECT_FALSE(table.CountTouch(5, /*admit=*/false));  // a read: 1
  EXPECT_EQ(table.Touch(5), nullptr);                  // a push: 2
  EXPECT_TRUE(table.CountTouch(5, /*admit=*/false));   // a read: 3, admitted
  EXPECT_EQ(table.size(), 0);
  EXPECT_EQ(table.pending().at(5), 3);  // a read leaves it counted
  ASSERT_NE(table.Touch(5), nullptr);   // the push that makes its row
  EXPECT_EQ(table.size(), 1);
  EXPECT_FALSE(table.pending().contains(5));
  std::vector<float> initial(2);
  table.InitialValues(9, initial);
  EXPECT_EQ(initial, (std::vector<float>{9, 9.5f}));
}

TEST(HashRowTableTest, Admission_PastThePendingLimit_CountsInSharedCountersNeverLate) {
  HashRowTable::Limits limits;
  limits.admit_after = 2;
  limits.max_pending = 1;
  limits.overflow_counters = 4;
  HashRowTable table = MakeTable(limits);
  EXPECT_FALSE(table.CountTouch(1, false));  // exact
  EXPECT_TRUE(table.overflow_counts().empty());
  EXPECT_FALSE(table.CountTouch(2, false));  // the map is full: shared
  EXPECT_EQ(table.overflow_counts().size(), 4u);
  ASSERT_NE(table.Touch(1), nullptr);  // 1 admitted: the map has room again
  EXPECT_TRUE(table.pending().empty());
  // 2 keeps counting in its shared counter, and is admitted on time.
  EXPECT_NE(table.Touch(2), nullptr);
  EXPECT_TRUE(table.pending().empty());
  EXPECT_EQ(table.size(), 2);
}

TEST(HashRowTableTest, CheckRoom_PastMaxRows_IsResourceExhaustedForNewRowsOnly) {
  HashRowTable::Limits limits;
  limits.max_rows = 2;
  HashRowTable table = MakeTable(limits);
  ASSERT_NE(table.Touch(1), nullptr);
  ASSERT_NE(table.Touch(2), nullptr);
  EXPECT_TRUE(table.CheckRoom(std::vector<int64_t>{1, 2}, "emb").ok());
  absl::Status full = table.CheckRoom(std::vector<int64_t>{2, 3}, "emb");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("'emb' holds 2 rows"), std::string::npos) << full;
}

TEST(HashRowTableTest, Loaders_ReplaceForgetsTouchCounts_LoadAddsRowsAndCounts) {
  HashRowTable::Limits limits;
  limits.admit_after = 5;
  HashRowTable table = MakeTable(limits);
  EXPECT_FALSE(table.CountTouch(3, false));
  HashRowTable::Rows rows;
  rows[4] = {1, 2, 3, 4};
  table.Replace(std::move(rows));
  EXPECT_EQ(table.size(), 1);
  EXPECT_TRUE(table.pending().empty());
  EXPECT_EQ(RowOf(table, 4), (std::vector<float>{1, 2, 3, 4}));

  const std::vector<float> row = {5, 6, 7, 8};
  std::string bytes(sizeof(float) * row.size(), '\0');
  std::memcpy(bytes.data(), row.data(), bytes.size());
  table.LoadRow(9, bytes.data());
  table.LoadPending(11, 4);
  table.LoadOverflowCounts({0, 1});
  EXPECT_EQ(table.size(), 2);
  EXPECT_EQ(RowOf(table, 9), row);
  EXPECT_EQ(table.pending().at(11), 4);
  EXPECT_EQ(table.overflow_counts(), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(table.CountTouch(11, true));  // its 5th touch
}

}  // namespace
}  // namespace pst::ps
