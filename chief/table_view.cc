#include "chief/table_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pst::chief {

std::string ShortCount(double n) {
  if (n < 1000) return absl::StrFormat("%.0f", n);
  if (n < 1e6) return absl::StrFormat(n < 1e4 ? "%.2fk" : n < 1e5 ? "%.1fk" : "%.0fk", n / 1e3);
  if (n < 1e9) return absl::StrFormat(n < 1e7 ? "%.2fM" : n < 1e8 ? "%.1fM" : "%.0fM", n / 1e6);
  return absl::StrFormat("%.2fG", n / 1e9);
}

void TableView::Update(const std::vector<proto::HealthResponse>& health, absl::Time now) {
  Totals t;
  for (const proto::HealthResponse& h : health) {
    t.rows += h.hash_rows();
    t.rows_on_disk += h.table_rows_on_disk();
    t.evictions += h.table_evictions();
    t.disk_reads += h.table_disk_reads();
    t.disk_writes += h.table_disk_writes();
  }
  if (at_.has_value() && now > *at_) {
    const double secs = absl::ToDoubleSeconds(now - *at_);
    auto rate = [&](int64_t then, int64_t later) {
      return later >= then ? static_cast<double>(later - then) / secs : 0.0;
    };
    evictions_per_sec_ = rate(totals_.evictions, t.evictions);
    reads_per_sec_ = rate(totals_.disk_reads, t.disk_reads);
    writes_per_sec_ = rate(totals_.disk_writes, t.disk_writes);
  }
  totals_ = t;
  at_ = now;
}

std::string TableView::ProgressText() const {
  if (totals_.rows == 0 && totals_.rows_on_disk == 0) return "";
  std::string text = absl::StrCat("tables ", ShortCount(static_cast<double>(totals_.rows)),
                                  " rows, ", ShortCount(evictions_per_sec_), " evicted/s");
  if (totals_.rows_on_disk > 0 || totals_.disk_reads > 0) {
    absl::StrAppend(&text, ", ", ShortCount(static_cast<double>(totals_.rows_on_disk)),
                    " on disk, ", ShortCount(reads_per_sec_), " reads/s, ",
                    ShortCount(writes_per_sec_), " writes/s");
  }
  return text;
}

}  // namespace pst::chief
