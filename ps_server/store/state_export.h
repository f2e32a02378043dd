// A store's whole state as the parts of a resync (VariableStore::
// ExportState, store_state.cc), taken at one instant and made one part at a
// time, so that a hash table with a disk tier is never whole in memory:
// everything else (specs, the mode's state, dense variables, tables held in
// memory only) is copied into parts at that instant; such a table's rows
// are read from a cut of it (table_cut.h: a scratch table of its rows in
// memory and a snapshot of those on disk) as the parts are taken, each
// table's in parts of their own, after the others. Every part is of the
// same form as before: LoadState takes them in order.
//
// Thread-compatible: one caller at a time (Next changes it).
#ifndef PST_PS_SERVER_STORE_STATE_EXPORT_H_
#define PST_PS_SERVER_STORE_STATE_EXPORT_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/table_cut.h"

namespace pst::ps {

class StateExport {
 public:
  // A table whose rows are read from `cut` as the parts are taken,
  // `rows_per_part` a part: `rows` of them when `exact`, else at most
  // `rows` (a ttl table's rows on disk may be gone, which only a scan
  // would tell: the parts are planned for `rows`, and those past the last
  // row are sent empty).
  struct Table {
    std::string name;
    int64_t version = 0;
    std::unique_ptr<TableCut> cut;
    int64_t rows = 0;
    int64_t rows_per_part = 1;
    bool exact = true;
  };

  // `made`: the parts copied at the instant, part 0 (the store's variables
  // and mode) first; then each of `tables`' rows.
  StateExport(std::deque<proto::StoreChunk> made, std::vector<Table> tables);

  // Parts in all, known from the start; those taken so far.
  int64_t parts() const { return parts_; }
  int64_t taken() const { return taken_; }

  // The next part, in order, with its part() and parts() set. Errors:
  // FailedPrecondition once every part was taken; the cut's read errors
  // (DataLoss, Unavailable), or DataLoss when a cut gives more rows than
  // planned, or fewer than an exact count; after an error, every call
  // returns it.
  absl::StatusOr<proto::StoreChunk> Next();

 private:
  std::deque<proto::StoreChunk> made_;
  std::vector<Table> tables_;
  size_t table_ = 0;              // the table whose rows come next
  int64_t table_rows_taken_ = 0;  // of tables_[table_]
  std::unique_ptr<TableCut::Reader> reader_;  // of tables_[table_]
  int64_t parts_ = 0;
  int64_t taken_ = 0;
  absl::Status failed_;
};

// Every part of `state` left, in order (tests, and a store copied whole).
absl::StatusOr<std::vector<proto::StoreChunk>> TakeAllParts(StateExport& state);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_STATE_EXPORT_H_
