// The chief's view of a job's hash tables, for the progress line: rows in
// memory and on disk over every ps, and how fast rows are evicted and read
// from and written to the disk tier, from the ps' Health answers.
//
// Thread-compatible: the chief's watch loop updates it and shows it.
#ifndef PST_CHIEF_TABLE_VIEW_H_
#define PST_CHIEF_TABLE_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/pstrain.pb.h"

namespace pst::chief {

class TableView {
 public:
  // Sums of the ps' figures at one moment.
  struct Totals {
    int64_t rows = 0;  // in memory
    int64_t rows_on_disk = 0;
    int64_t evictions = 0;
    int64_t disk_reads = 0;
    int64_t disk_writes = 0;
  };

  // Takes every ps's Health answer, read at `now`. Rates are taken over
  // the time since the previous call; counters that went down (a ps
  // restarted) start the rates again.
  void Update(const std::vector<proto::HealthResponse>& health, absl::Time now);

  // "tables 31.2k rows, 1.5k evicted/s", plus ", 93.4k on disk, 300
  // reads/s, 1.5k writes/s" with a disk tier; "" before any row.
  std::string ProgressText() const;

  const Totals& totals() const { return totals_; }

 private:
  Totals totals_;
  std::optional<absl::Time> at_;  // when totals_ were read
  double evictions_per_sec_ = 0, reads_per_sec_ = 0, writes_per_sec_ = 0;
};

// 950, 31.2k, 4.1M: three significant digits at most.
std::string ShortCount(double n);

}  // namespace pst::chief

#endif  // PST_CHIEF_TABLE_VIEW_H_
