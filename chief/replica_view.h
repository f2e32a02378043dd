// The chief's view of a replicated job's shards (PlacementPlan.replicas 2):
// where each shard's primary and backup are, and whether the backup is in
// sync, as the ps' Health answers (their ReplicaStates) tell. It feeds the
// progress line, the metrics and the summary JSON.
//
// A backup is in sync when its primary has forwarded every change to it
// and none failed, and the backup holds an unbroken copy from that primary.
// At the end of a job, with digests (HealthRequest.digest), it is checked
// bit for bit: the same number of changes applied and the same digest.
//
// Thread-safe.
#ifndef PST_CHIEF_REPLICA_VIEW_H_
#define PST_CHIEF_REPLICA_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::chief {

class ReplicaView {
 public:
  struct Shard {
    int shard = 0;
    int primary = 0;
    int backup = 0;
    bool primary_seen = false;  // the primary's state was heard
    bool backup_seen = false;   // the backup holds a copy
    bool forwarding = false;    // the primary forwards every change to it
    bool copy_ok = false;       // that copy is whole and not broken
    bool resyncing = false;     // the primary is sending it the shard whole
    int64_t seq = 0;            // changes the primary sequenced
    int64_t acked = 0;          // ... its backup acknowledged
    int64_t backup_seq = 0;     // changes the backup applied
    // With digests: both digests were read at the same seq and are equal.
    bool checked = false;
    bool digests_match = false;

    bool in_sync() const { return primary_seen && backup_seen && forwarding && copy_ok; }
  };

  explicit ReplicaView(const proto::PlacementPlan& plan);

  // Whether the job is replicated (nothing to show otherwise).
  bool enabled() const { return enabled_; }

  // The shards' copies moved (a failover): `shards` by shard, backup -1 for
  // none. What was heard of the moved copies is forgotten.
  void SetLayout(const google::protobuf::RepeatedPtrField<proto::ShardCopies>& shards);

  // Takes ps `ps`'s Health answer.
  void Update(int ps, const proto::HealthResponse& health);

  std::vector<Shard> shards() const;
  int in_sync() const;
  // "backups 2/2 in sync", and ", 1 resyncing" while some backup is being
  // sent its shard ("" when not enabled).
  std::string ProgressText() const;
  // {"replicas": 2, "shards": [{"shard", "primary", "backup", "in_sync",
  // "resyncing", "changes", "backup_changes", "digests_match" (when
  // checked)}]}.
  nlohmann::json ToJson() const;

 private:
  const bool enabled_;
  mutable absl::Mutex mu_;
  std::vector<Shard> shards_ ABSL_GUARDED_BY(mu_);
  // The last digest heard of each shard's copies (0: none), by shard.
  std::vector<uint64_t> digest_of_primary_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> digest_of_backup_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::chief

#endif  // PST_CHIEF_REPLICA_VIEW_H_
