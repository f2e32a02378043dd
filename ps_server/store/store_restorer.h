// A restore of a VariableStore from a checkpoint, in stages, for shards
// read one record at a time: Absorb every record of every shard (in any
// order), then Commit. Each record gives up only the rows the store holds
// (a variable takes its rows by global row, or by hash id, from every
// record of the same logical variable, with its slots, and the highest
// version among them), so the memory a restore needs is a copy of the
// store's variables plus one record, whatever the checkpoint's size.
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
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/checkpoint_format.h"
#include "proto/pstrain.pb.h"

namespace pst::ps {

class VariableStore;

class StoreRestorer {
 public:
  ~StoreRestorer();
  // Whether some variable here takes rows of `spec`'s logical variable: a
  // record it does not hold need not be read into memory.
  bool Holds(const proto::VariableSpec& spec) const;
  // Errors: FailedPrecondition naming the variable when its row width or
  // its number of optimizer slots differs from this store's.
  absl::Status Absorb(const common::ShardRecord& record);
  // Errors: FailedPrecondition naming the variable when no record held it
  // or some of its rows, or when variables were created since
  // BeginRestore. Otherwise as Restore. A disk tier error emptying a
  // table's rows on disk is returned after the swap (the rows the tier
  // cannot take then stay in memory).
  absl::Status Commit(int64_t generation);

 private:
  friend class VariableStore;
  struct Loaded;
  explicit StoreRestorer(VariableStore* store);
  // Takes a hash record's admission counts into `l`'s.
  absl::Status AbsorbAdmission(const common::ShardRecord& r, Loaded* l);
  VariableStore* const store_;
  int num_slots_ = 0;
  std::vector<std::unique_ptr<Loaded>> loaded_;
  absl::flat_hash_map<std::string, std::vector<Loaded*>> by_logical_;
  bool committed_ = false;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_STORE_RESTORER_H_
