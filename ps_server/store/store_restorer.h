// A restore of a VariableStore from a checkpoint, in stages, for shards
// read one record at a time: Absorb every record of every shard (in any
// order), then Commit. Each record gives up only the rows the store holds
// (a variable takes its rows by global row, or by hash id, from every
// record of the same logical variable, with its slots, and the highest
// version among them), so the memory a restore needs is a copy of the
// store's variables plus one record, whatever the checkpoint's size. A
// table with a disk tier needs not even that: its records are read row by
// row (Streams, AbsorbRows) into a scratch table of the tier, and Commit
// loads them from there, the policy's first rows past the capacity going
// to disk as they come.
// An incremental checkpoint is restored link by link, its chain's full
// checkpoint first: NextLink between two links. A later link's records
// replace an earlier one's dense rows and hash rows (admission counts
// included), and its removed ids go.
// Nothing in the store changes before Commit; a restorer dropped
// uncommitted changes nothing. VariableStore::BeginRestore makes one
// (VariableStore::Restorer), for the variables the store holds then.
//
// Thread-safety: thread-compatible (one thread drives it); the store serves
// other calls meanwhile. Absorb reads only what never changes in a
// Variable (spec, rows, dim). Commit takes the store's mu_ exclusively,
// then each Variable's mu in turn, then the SyncLedger's mutex (the store's
// lock order), and completes the pulls parked before it, Aborted, with no
// lock held.
#ifndef PST_PS_SERVER_STORE_STORE_RESTORER_H_
#define PST_PS_SERVER_STORE_STORE_RESTORER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/checkpoint_format.h"
#include "common/shard_reader.h"
#include "proto/pstrain.pb.h"

namespace pst::ps {

class VariableStore;

class StoreRestorer {
 public:
  ~StoreRestorer();
  // Whether some variable here takes rows of `spec`'s logical variable: a
  // record it does not hold need not be read into memory.
  bool Holds(const proto::VariableSpec& spec) const;
  // Whether some table here that takes rows of `spec`'s logical variable
  // keeps rows on disk: its records are best not read into memory, but
  // absorbed without their rows, then row by row with AbsorbRows.
  bool Streams(const proto::VariableSpec& spec) const;
  // Errors: FailedPrecondition naming the variable when its row width
  // differs from this store's, or when it was saved with another optimizer
  // (name, form or slots: the record's spec.optimizer; for a record
  // without one, the number of slots) than the one it trains with here,
  // unless the restore resets slots (BeginRestore): then its values and
  // version are restored and its slots start at their initial values. A
  // hash record
  // read without its rows (common::ShardReader::Next's layout) gives its
  // version and admission counts here, its rows to AbsorbRows.
  absl::Status Absorb(const common::ShardRecord& record);
  // Takes rows of `record` (as ShardReader::ReadRows gives them): a table
  // with a disk tier into a scratch table of the tier, any other into
  // memory. Errors: as Absorb's; the disk tier's.
  absl::Status AbsorbRows(const common::ShardRecord& record, const common::ShardRowChunk& chunk);
  // The records absorbed from now on are of the next link of a chain.
  void NextLink() { ++link_; }
  // Errors: FailedPrecondition naming the variable when no record held it
  // or some of its rows, or when variables were created since
  // BeginRestore. Otherwise as Restore. A disk tier error emptying a
  // table's rows on disk is returned after the swap (the rows the tier
  // cannot take then stay in memory), and so is one reading back the rows
  // a table staged on disk (the rows not read back are then missing: the
  // caller must restore again).
  absl::Status Commit(int64_t generation);

 private:
  friend class VariableStore;
  struct Loaded;
  StoreRestorer(VariableStore* store, bool reset_slots);
  // FailedPrecondition naming `r`'s variable when it was saved with
  // another optimizer than `l`'s, unless reset_slots_; then `l` starts
  // its slots afresh.
  absl::Status CheckOptimizer(const common::ShardRecord& r, Loaded* l) const;
  // Removes a hash record's removed ids that `l` holds.
  absl::Status AbsorbRemoved(const common::ShardRecord& r, Loaded* l);
  // Takes a hash record's admission counts into `l`'s.
  absl::Status AbsorbAdmission(const common::ShardRecord& r, Loaded* l);
  // Commit: loads the rows `l` staged on disk into its table, just
  // emptied by Replace. Errors: the disk tier's.
  absl::Status LoadStaged(Loaded& l);
  VariableStore* const store_;
  const bool reset_slots_;
  std::vector<std::unique_ptr<Loaded>> loaded_;
  absl::flat_hash_map<std::string, std::vector<Loaded*>> by_logical_;
  bool committed_ = false;
  int link_ = 0;  // of a chain: the link being absorbed
};

// Absorbs every record of `reader`'s shard into each of `restorers` that
// holds it (a ps restores its own store and the backup copies it keeps),
// reading the records of tables that keep rows on disk row by row. The
// caller then checks reader.file_crc32() against the manifest, and
// commits. Errors: the reader's and the restorers'.
absl::Status AbsorbShard(common::ShardReader& reader, std::span<StoreRestorer* const> restorers);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_STORE_RESTORER_H_
