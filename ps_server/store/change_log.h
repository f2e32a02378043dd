// Which rows of a store's tables changed between its snapshots, and which
// snapshot was written last, for incremental checkpoints (VariableStore::
// Snapshot with SnapshotChanges, SnapshotWritten).
//
// Each tracked snapshot closes an interval: the ids each table noted since
// the snapshot before (HashRowTable::TakeChanges), and every variable's
// version at the snapshot. An incremental snapshot holds what changed since
// its base, the snapshot last written: the union of the intervals since,
// and the dense variables whose version moved. A write makes its snapshot
// the base and drops the intervals it covers; the intervals of a snapshot
// never written (a cut tried again, a save that failed) stay for the next.
//
// Thread-safety: thread-compatible; the store guards it.
#ifndef PST_PS_SERVER_STORE_CHANGE_LOG_H_
#define PST_PS_SERVER_STORE_CHANGE_LOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ps_server/store/hash_row_table.h"

namespace pst::ps {

class ChangeLog {
 public:
  // Versions by variable name.
  using Versions = absl::flat_hash_map<std::string, int64_t>;
  // Snapshots whose versions are kept until written: older ones, never
  // written, can no longer become the base.
  static constexpr size_t kPendingSnapshots = 16;

  bool on() const { return on_; }
  // Starts noting, from a snapshot with no base; the tables start theirs.
  void Start();
  // Stops and forgets everything.
  void Stop();
  // Forgets the base and every interval (a restore replaced the state):
  // no incremental snapshot until one is written again.
  void Forget();

  // Closes the interval that ends at a new snapshot: `tables`, the ids each
  // hash table noted (by variable name), and `versions`, every variable's
  // version at the snapshot. Returns the snapshot's number (from 1).
  int64_t Close(absl::flat_hash_map<std::string, HashRowTable::ChangedIds> tables,
                Versions versions);

  // Whether `base` names the snapshot written last, of the variables named
  // in `versions` (one created since needs a full snapshot).
  bool IsBase(const std::string& base, const Versions& versions) const;
  // The version of variable `name` at the base (-1: none).
  int64_t BaseVersion(const std::string& name) const;
  // The ids of table `name` changed since the base, ascending (the
  // intervals closed since, the last one included).
  std::vector<int64_t> ChangedSinceBase(const std::string& name) const;

  // Snapshot `seq` was written as the checkpoint `name`: the base from now
  // on. Nothing for a snapshot no longer pending (taken before a Forget, or
  // more than kPendingSnapshots ago).
  void Written(int64_t seq, const std::string& name);

 private:
  struct Interval {
    int64_t seq = 0;  // the snapshot that closed it
    absl::flat_hash_map<std::string, HashRowTable::ChangedIds> tables;
  };
  bool on_ = false;
  int64_t next_seq_ = 1;
  std::deque<Interval> intervals_;       // since the base, oldest first
  std::map<int64_t, Versions> pending_;  // snapshots not written, by number
  std::string base_;                     // "": none
  Versions base_versions_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_CHANGE_LOG_H_
