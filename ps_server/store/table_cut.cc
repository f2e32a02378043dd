#include "ps_server/store/table_cut.h"

#include <utility>

#include "absl/status/status.h"

namespace pst::ps {
namespace {

class TableCut : public common::ShardRowStream {
 public:
  TableCut(std::shared_ptr<DiskTier> tier, std::unique_ptr<DiskTier::View> memory,
           std::unique_ptr<DiskTier::View> disk, int64_t stale_before,
           std::optional<int64_t> rows)
      : tier_(std::move(tier)),
        memory_(std::move(memory)),
        disk_(std::move(disk)),
        stale_before_(stale_before),
        rows_(rows) {}

  absl::StatusOr<int64_t> Count() const override {
    if (rows_.has_value()) return *rows_;
    int64_t n = 0;
    absl::Status s = ForEach([&](int64_t, std::span<const float>, int64_t, double) {
      ++n;
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return n;
  }

  absl::Status ForEach(RowFn fn) const override {
    std::unique_ptr<DiskTier::Cursor> m = memory_->Scan();
    std::unique_ptr<DiskTier::Cursor> d = disk_->Scan();
    while (m->Valid() || d->Valid()) {
      if (d->Valid() && (!m->Valid() || d->id() < m->id())) {
        if (d->last() >= stale_before_) {
          absl::Status s = fn(d->id(), d->row(), d->last(), d->count());
          if (!s.ok()) return s;
        }
        d->Next();
        continue;
      }
      if (d->Valid() && d->id() == m->id()) d->Next();  // the stale copy
      absl::Status s = fn(m->id(), m->row(), m->last(), m->count());
      if (!s.ok()) return s;
      m->Next();
    }
    if (!m->status().ok()) return m->status();
    return d->status();
  }

 private:
  // Declared first: the views go before their tier.
  const std::shared_ptr<DiskTier> tier_;
  const std::unique_ptr<DiskTier::View> memory_;
  const std::unique_ptr<DiskTier::View> disk_;
  const int64_t stale_before_;
  const std::optional<int64_t> rows_;
};

}  // namespace

std::unique_ptr<common::ShardRowStream> MakeTableCut(std::shared_ptr<DiskTier> tier,
                                                     std::unique_ptr<DiskTier::View> memory,
                                                     std::unique_ptr<DiskTier::View> disk,
                                                     int64_t stale_before,
                                                     std::optional<int64_t> rows) {
  return std::make_unique<TableCut>(std::move(tier), std::move(memory), std::move(disk),
                                    stale_before, rows);
}

}  // namespace pst::ps
