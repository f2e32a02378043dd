// A hash table's rows copied before a snapshot's instant while pushes go on
// (VariableStore::Snapshot), made the table as at the instant once the rows
// changed since are copied again at it (Complete). The copy is held in
// memory, or spilled to a file in a directory (the checkpoint directory: a
// ps's saves), made and unlinked at once, and streamed from there to the
// checkpoint writer: a save then holds no copy of the table's rows in
// memory, only their ids.
//
// Thread-compatible. The stream Complete makes reads the file with pread
// and may be read on any thread, after the TablePrecopy is gone.
#ifndef PST_PS_SERVER_STORE_TABLE_PRECOPY_H_
#define PST_PS_SERVER_STORE_TABLE_PRECOPY_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"
#include "ps_server/store/eviction_index.h"

namespace pst::ps {

// Appends a table's row (its values, then each slot's, `dim` floats each)
// to a hash record, with its index entry (bounded tables; null: none).
void AppendRow(common::ShardRecord* r, int64_t dim, int num_slots, int64_t id,
               std::span<const float> row, const EvictionIndex::Entry* e);

class TablePrecopy {
 public:
  // Rows of `dim` values then `num_slots` slots of `dim`. `spill_dir` "":
  // held in memory. Errors: Internal naming the directory when no file can
  // be made there.
  static absl::StatusOr<std::unique_ptr<TablePrecopy>> Create(const std::string& spill_dir,
                                                              int64_t dim, int num_slots);
  ~TablePrecopy();
  TablePrecopy(const TablePrecopy&) = delete;
  TablePrecopy& operator=(const TablePrecopy&) = delete;

  // Adds row `id` (its values then each slot's) and its index entry (null:
  // an unbounded table's). Errors: Internal for a write that failed (the
  // copy is then worthless).
  absl::Status Add(int64_t id, std::span<const float> row, const EvictionIndex::Entry* entry);

  // `*r`: the table's hash record at the instant holding only the rows of
  // `changed` (ascending; the ids noted since the copy began) that it
  // still stores. Makes it the whole table at the instant: the copy's rows
  // but the changed ones, then `*r`'s, held (in memory) or as a stream
  // (spilled). Errors: Internal, flushing the spill.
  absl::Status Complete(std::vector<int64_t> changed, common::ShardRecord* r);

  // The spilled copy (table_precopy.cc).
  struct Spill;

 private:
  TablePrecopy(int64_t dim, int num_slots) : dim_(dim), num_slots_(num_slots) {}
  const int64_t dim_;
  const int num_slots_;
  common::ShardRecord held_;      // in memory: the rows
  std::shared_ptr<Spill> spill_;  // spilled: the file, and the ids
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_TABLE_PRECOPY_H_
