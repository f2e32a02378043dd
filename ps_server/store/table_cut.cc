#include "ps_server/store/table_cut.h"

#include <utility>

namespace pst::ps {

TableCut::TableCut(std::shared_ptr<DiskTier> tier, std::unique_ptr<DiskTier::View> memory,
                   std::unique_ptr<DiskTier::View> disk, int64_t stale_before,
                   std::optional<int64_t> rows, int64_t max_rows)
    : tier_(std::move(tier)),
      memory_(std::move(memory)),
      disk_(std::move(disk)),
      stale_before_(stale_before),
      rows_(rows),
      max_rows_(max_rows) {}

absl::StatusOr<int64_t> TableCut::Count() const {
  if (rows_.has_value()) return *rows_;
  int64_t n = 0;
  std::unique_ptr<Reader> r = Read();
  for (; r->Valid(); r->Next()) ++n;
  if (absl::Status s = r->status(); !s.ok()) return s;
  return n;
}

absl::Status TableCut::ForEach(RowFn fn) const {
  std::unique_ptr<Reader> r = Read();
  for (; r->Valid(); r->Next()) {
    if (absl::Status s = fn(r->id(), r->row(), r->last(), r->count()); !s.ok()) return s;
  }
  return r->status();
}

std::unique_ptr<TableCut::Reader> TableCut::Read() const {
  return std::unique_ptr<Reader>(new Reader(*this));
}

TableCut::Reader::Reader(const TableCut& cut)
    : memory_(cut.memory_->Scan()), disk_(cut.disk_->Scan()), stale_before_(cut.stale_before_) {
  Settle();
}

void TableCut::Reader::Settle() {
  DiskTier::Cursor* m = memory_.get();
  DiskTier::Cursor* d = disk_.get();
  for (;;) {
    if (d->Valid() && (!m->Valid() || d->id() < m->id())) {
      if (d->last() >= stale_before_) {
        at_ = d;
        return;
      }
      d->Next();  // gone by ttl
      continue;
    }
    if (d->Valid() && d->id() == m->id()) {
      d->Next();  // the stale copy of a row in memory
      continue;
    }
    at_ = m->Valid() ? m : nullptr;
    return;
  }
}

void TableCut::Reader::Next() {
  at_->Next();
  Settle();
}

absl::Status TableCut::Reader::status() const {
  if (!memory_->status().ok()) return memory_->status();
  return disk_->status();
}

}  // namespace pst::ps
