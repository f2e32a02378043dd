#include "ps_server/store/state_export.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace pst::ps {

StateExport::StateExport(std::deque<proto::StoreChunk> made, std::vector<Table> tables)
    : made_(std::move(made)), tables_(std::move(tables)) {
  parts_ = static_cast<int64_t>(made_.size());
  for (Table& t : tables_) {
    t.rows_per_part = std::max<int64_t>(1, t.rows_per_part);
    parts_ += (t.rows + t.rows_per_part - 1) / t.rows_per_part;
  }
}

absl::StatusOr<proto::StoreChunk> StateExport::Next() {
  if (!failed_.ok()) return failed_;
  if (taken_ >= parts_) {
    return absl::FailedPreconditionError(
        absl::StrCat("store state: all ", parts_, " parts were taken"));
  }
  proto::StoreChunk part;
  if (!made_.empty()) {
    part = std::move(made_.front());
    made_.pop_front();
  } else {
    while (tables_[table_].rows == 0) ++table_;  // a part left means a row left
    Table& t = tables_[table_];
    if (reader_ == nullptr) reader_ = t.cut->Read();
    const int64_t n = std::min(t.rows_per_part, t.rows - table_rows_taken_);
    proto::VariableChunk* c = part.add_variables();
    c->set_name(t.name);
    c->set_version(t.version);
    c->mutable_ids()->Reserve(static_cast<int>(n));
    c->mutable_row_last()->Reserve(static_cast<int>(n));
    c->mutable_row_count()->Reserve(static_cast<int>(n));
    std::string* rows = c->mutable_rows();
    for (int64_t i = 0; i < n; ++i, reader_->Next()) {
      if (!reader_->Valid()) break;
      const std::span<const float> row = reader_->row();
      if (i == 0) rows->reserve(static_cast<size_t>(n) * row.size_bytes());
      c->add_ids(reader_->id());
      rows->append(reinterpret_cast<const char*>(row.data()), row.size_bytes());
      c->add_row_last(reader_->last());
      c->add_row_count(reader_->count());
    }
    table_rows_taken_ += n;  // planned, given or not (a bound's last parts)
    const bool last_part = table_rows_taken_ >= t.rows;
    if (!reader_->status().ok()) {
      failed_ = reader_->status();
      return failed_;
    }
    if ((t.exact && c->ids_size() < n) || (last_part && reader_->Valid())) {
      failed_ = absl::DataLossError(absl::StrCat(
          "store state: the cut of '", absl::CHexEscape(t.name), "' gave ",
          reader_->Valid() ? "more" : "fewer", " rows than the ", t.rows,
          t.exact ? " it counted" : " it was bounded by"));
      return failed_;
    }
    if (last_part) {  // its views go now, not with the export
      reader_.reset();
      t.cut.reset();
      ++table_;
      table_rows_taken_ = 0;
    }
  }
  part.set_part(static_cast<int>(taken_));
  part.set_parts(static_cast<int>(parts_));
  ++taken_;
  return part;
}

absl::StatusOr<std::vector<proto::StoreChunk>> TakeAllParts(StateExport& state) {
  std::vector<proto::StoreChunk> parts;
  while (state.taken() < state.parts()) {
    absl::StatusOr<proto::StoreChunk> part = state.Next();
    if (!part.ok()) return part.status();
    parts.push_back(*std::move(part));
  }
  return parts;
}

}  // namespace pst::ps
