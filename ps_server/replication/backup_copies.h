// The backup side of replicated shards: the copies this ps holds of other
// ps' shards, each a VariableStore fed only by its primary's changes
// (ReplicateRequest), applied in seq order, each once.
//
// A change that arrives ahead of its turn waits (kMaxAhead at most per
// copy); one already applied (a resend) is acknowledged again. A change
// numbered 1 of a new stream (a new primary incarnation, or the same
// primary forwarding afresh) starts the copy afresh: a create (every copy
// is restored next), or part 0 of a state (a resync: the copy is whole,
// and may be taken, once its last part is applied). A primary sends the
// rest of a stream only once that first change was taken.
//
// A change the copy cannot take (it has no copy of that stream, or it
// refuses a change its primary took) is refused with FailedPrecondition
// and the copy is marked broken (a forward for a shard this ps serves now
// is refused with Aborted: see Take): its primary then counts its backup
// out of sync. A change refused as being of another restore generation was
// overtaken by a restore of both copies and counts as taken.
//
// Thread-safe; changes to different copies apply in parallel.
#ifndef PST_PS_SERVER_REPLICATION_BACKUP_COPIES_H_
#define PST_PS_SERVER_REPLICATION_BACKUP_COPIES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

// Sets `state`'s digest to `store`'s, or, when the store cannot take one
// (its disk tier failed), its digest_error, logged naming `copy`.
void FillDigest(const VariableStore& store, const std::string& copy, proto::ReplicaState* state);

class BackupCopies {
 public:
  using Done = std::function<void(absl::Status)>;

  // Changes waiting for an earlier one, per copy; one more is refused with
  // ResourceExhausted (and the copy broken).
  static constexpr int kMaxAhead = 4096;

  explicit BackupCopies(VariableStore::Options options) : options_(options) {}

  // Applies `request` in its turn; `done` runs once it is applied (perhaps
  // after later calls, on their thread) or refused.
  void Apply(std::shared_ptr<const proto::ReplicateRequest> request, Done done);

  // The copies held now, for restores.
  struct Held {
    int shard = 0;
    std::shared_ptr<VariableStore> store;
  };
  std::vector<Held> Copies() const;

  // Whether Take(shard) would succeed: OK, or FailedPrecondition when this
  // ps holds no copy of `shard`, or a broken one.
  absl::Status CanTake(int shard) const;
  // Removes the copy of `shard` and gives its store (to serve it as its
  // primary). Changes still waiting for an earlier one are refused with
  // Aborted: the primary that sent them is gone (or fenced off), and their
  // callers send them again to this ps.
  // From then on, forwards for `shard` are refused with Aborted (the old
  // primary, should it still run, is fenced off: ReplicaSource) until
  // Release(shard). Errors: as CanTake.
  absl::StatusOr<std::shared_ptr<VariableStore>> Take(int shard);
  // This ps no longer serves `shard`: a new primary may forward to it again.
  void Release(int shard);

  // One ReplicaState per copy (with `digest`, a digest of each, taken
  // between two changes).
  void States(bool digest, google::protobuf::RepeatedPtrField<proto::ReplicaState>* out) const;

 private:
  // Changes waiting for their turn, by seq.
  using Waiting =
      std::map<int64_t, std::pair<std::shared_ptr<const proto::ReplicateRequest>, Done>>;
  struct Copy {
    explicit Copy(const VariableStore::Options& options)
        : store(std::make_shared<VariableStore>(options)) {}
    std::shared_ptr<VariableStore> store;
    uint64_t source = 0;
    int64_t stream = 0;
    bool broken = false;
    // Holds the whole shard: started with a create, or with every part of
    // a state (a resync).
    bool whole = false;
    int64_t applied = 0;  // changes applied, in seq order
    Waiting ahead;
  };
  struct Slot {
    absl::Mutex mu;
    std::unique_ptr<Copy> copy ABSL_GUARDED_BY(mu);
    // Taken (promoted): this ps serves the shard now, and its old primary
    // is fenced off: its forwards are refused with Aborted.
    bool taken ABSL_GUARDED_BY(mu) = false;
  };

  // Adds a change to `waiting` (a resend of one waiting: both callers are
  // answered when it is applied).
  static void Wait(Waiting* waiting, int64_t seq,
                   std::shared_ptr<const proto::ReplicateRequest> request, Done done);

  // Applies one change to `copy` (in its turn).
  static absl::Status ApplyOne(VariableStore& store, const proto::ReplicateRequest& request);
  // Applies `request` (the next in turn) and every change waiting behind
  // it; appends each caller's answer to `answers`.
  static void ApplyInTurn(int shard, Copy& copy,
                          std::shared_ptr<const proto::ReplicateRequest> request, Done done,
                          std::vector<std::pair<Done, absl::Status>>* answers);

  const VariableStore::Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_REPLICATION_BACKUP_COPIES_H_
