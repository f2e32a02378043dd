#include "chief/table_view.h"

#include <gtest/gtest.h>

namespace pst::chief {
namespace {

proto::HealthResponse Health(int64_t rows, int64_t on_disk, int64_t evictions, int64_t reads,
                             int64_t writes) {
  proto::HealthResponse h;
  h.set_hash_rows(rows);
  h.set_table_rows_on_disk(on_disk);
  h.set_table_evictions(evictions);
  h.set_table_disk_reads(reads);
  h.set_table_disk_writes(writes);
  return h;
}

TEST(TableViewTest, NoRows_ShowsNothing) {
  TableView view;
  EXPECT_EQ(view.ProgressText(), "");
  view.Update({Health(0, 0, 0, 0, 0)}, absl::FromUnixSeconds(10));
  EXPECT_EQ(view.ProgressText(), "");
}

TEST(TableViewTest, SumsThePs_AndRatesOverTheTimeBetweenUpdates) {
  TableView view;
  view.Update({Health(1000, 0, 0, 0, 0), Health(500, 0, 0, 0, 0)}, absl::FromUnixSeconds(10));
  EXPECT_EQ(view.ProgressText(), "tables 1.50k rows, 0 evicted/s");
  view.Update({Health(1000, 0, 300, 0, 0), Health(600, 0, 100, 0, 0)}, absl::FromUnixSeconds(12));
  EXPECT_EQ(view.ProgressText(), "tables 1.60k rows, 200 evicted/s");
  EXPECT_EQ(view.totals().evictions, 400);
}

TEST(TableViewTest, DiskTier_ShowsRowsOnDiskAndItsReadsAndWrites) {
  TableView view;
  view.Update({Health(2000, 10000, 5000, 100, 5000)}, absl::FromUnixSeconds(0));
  view.Update({Health(2000, 12000, 7000, 600, 7000)}, absl::FromUnixSeconds(4));
  EXPECT_EQ(view.ProgressText(),
            "tables 2.00k rows, 500 evicted/s, 12.0k on disk, 125 reads/s, 500 writes/s");
}

TEST(TableViewTest, CountersThatWentDown_ARestartedPs_GiveNoNegativeRates) {
  TableView view;
  view.Update({Health(100, 0, 900, 0, 0)}, absl::FromUnixSeconds(0));
  view.Update({Health(10, 0, 5, 0, 0)}, absl::FromUnixSeconds(1));
  EXPECT_EQ(view.ProgressText(), "tables 10 rows, 0 evicted/s");
}

TEST(TableViewTest, ShortCount_ThreeDigitsAtMost) {
  EXPECT_EQ(ShortCount(950), "950");
  EXPECT_EQ(ShortCount(31234), "31.2k");
  EXPECT_EQ(ShortCount(4123456), "4.12M");
  EXPECT_EQ(ShortCount(512000), "512k");
}

}  // namespace
}  // namespace pst::chief
