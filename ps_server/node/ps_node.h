// One parameter server's logic, over its VariableStore: what
// CreateVariables, SetMembership, Health, Save and Restore do, whoever
// calls them, and, in replicated jobs (PlacementPlan.replicas 2), the data
// plane's changes too. The gRPC service (ps_server/grpc_ps_service.h) checks
// the caller and hands each call here; the in-process control
// (ps_server/in_process_control.h) calls it directly.
//
// Replication: the store is the primary copy of this ps's shard. A create
// whose request names a backup (CreateVariablesRequest.copies) makes every
// change to it from then on (creates, pushes, membership, and pulls of
// rows that make hash rows) go through a ReplicaSource, which forwards it
// to the backup and answers only once the backup holds it. The copies this
// ps holds of other ps' shards are kept in BackupCopies, fed by Replicate.
// When a shard's primary is lost, the chief promotes its backup (SetRoles):
// this ps then serves that copy as a primary too, and requests reach the
// primary that holds the variables they name. Save takes a shard; Restore
// restores every copy this ps holds. Without a backup the data plane calls
// go straight to the store.
//
// A save comes in phases (SaveRequest.phase): SNAPSHOT copies the
// variables at one instant (pushes held for the copy) and keeps the copy,
// answering its cut; WRITE writes the copy kept under
// checkpoint_dir/<checkpoint>; SNAPSHOT_AND_WRITE does both; DISCARD drops
// the copy kept. Saves and restores run on threads of their own, at most
// kMaxBackgroundJobs at once. Incremental checkpoints: a SNAPSHOT says
// whether the store notes which rows change (track_changes) and may ask
// for only what changed since the snapshot last written (base); a Restore
// reads an incremental checkpoint's chain link by link.
//
// Thread-safe. Does not own the store, which must outlive it.
#ifndef PST_PS_SERVER_NODE_PS_NODE_H_
#define PST_PS_SERVER_NODE_PS_NODE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_format.h"
#include "proto/pstrain.pb.h"
#include "ps_server/node/background_work.h"
#include "ps_server/replication/backup_copies.h"
#include "ps_server/replication/replica_source.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

class PsNode {
 public:
  struct Options {
    int ps_index = 0;
    std::string task;  // "ps-0", for Health
    uint64_t incarnation = 0;
    // Checkpoints are saved and restored only under it ("": none, and Save
    // and Restore are refused).
    std::string checkpoint_dir;
    // Fault injection for tests: every Save waits this long between its
    // snapshot and its file (and says so in the log), so that a test can
    // kill the ps in the middle of a save (ps_server's --test_save_delay_ms).
    absl::Duration save_delay = absl::ZeroDuration();
    // Replicated jobs: a link to ps `index`, for the backup of this ps's
    // shard (null: this ps keeps no backup, and refuses to name one).
    std::function<std::unique_ptr<ReplicaLink>(int index)> link_to;
    // The limits of the backup copies' stores (this ps's own store's).
    VariableStore::Options store_options;
    // A shard sent whole to a backup (a resync) goes in parts of about this
    // many bytes (ReplicaSource::kStateWindow of them in flight at most).
    int64_t resync_part_bytes = int64_t{4} << 20;
    // A save copies no dense variable at its instant: it writes each from
    // the variable itself, and a push that comes first copies that
    // variable, while the copies stay within this fraction of the dense
    // variables' bytes (values and slots), and otherwise waits for the
    // writer to reach it (dense_snapshot.h). 0: every dense variable copied
    // at the instant.
    double snapshot_copy_budget = 0.25;
  };

  // Saves and restores running at once at most; more are refused with
  // RESOURCE_EXHAUSTED.
  static constexpr int kMaxBackgroundJobs = 2;

  PsNode(VariableStore* store, Options options);

  VariableStore* store() const { return store_; }
  const Options& options() const { return options_; }

  // Runs `done` exactly once, with the call's status, perhaps before this
  // returns and perhaps on another thread; `request` and `response` must
  // live until then.
  using Done = std::function<void(absl::Status)>;

  // VariableStore::Create; logs the variables made. With request.copies,
  // first starts forwarding to the backup it names (InvalidArgument for a
  // backup that is this ps or not a ps index; FailedPrecondition when this
  // ps was given no link_to).
  void CreateVariables(const proto::CreateVariablesRequest* request,
                       proto::CreateVariablesResponse* response, Done done);
  void SetMembership(const proto::MembershipRequest* request, proto::MembershipResponse* response,
                     Done done);
  // This ps's identity, sizes, training figures and copies.
  void Health(const proto::HealthRequest& request, proto::HealthResponse* response) const;

  // The data plane, as VariableStore's calls of the same names, kept in
  // step with the backup (see the file comment). `payloads` need only live
  // until the call returns.
  void Push(const proto::PushRequest* request, const VariableStore::Payloads* payloads,
            proto::PushResponse* response, Done done);
  // Returns the ticket (VariableStore::CancelWaiter) of the pull parked in
  // `*parked_in` (when given: the store that serves the request), or 0.
  uint64_t PushPull(const proto::PushPullRequest* request, const VariableStore::Payloads* payloads,
                    proto::PullResponse* response, Done done,
                    std::shared_ptr<VariableStore>* parked_in = nullptr);
  void PushRows(const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                Done done);
  void PullRows(const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                Done done);
  // A change from the primary of a shard this ps backs up.
  void Replicate(std::shared_ptr<const proto::ReplicateRequest> request, Done done);
  // The layout of a replicated job (RolesRequest). With `resync`, each
  // primary here whose backup named does not take its changes sends it the
  // shard whole (ReplicaSource::Resync) before this answers. Errors:
  // FailedPrecondition for a version older than the last one taken, or a
  // shard to serve whose copy this ps does not hold whole (none, out of
  // step with its primary, or still being sent).
  void SetRoles(const proto::RolesRequest* request, proto::RolesResponse* response, Done done);

  // The store that serves variable `name`: a promoted shard's that holds
  // it, or this ps's own (for a name no store holds too).
  std::shared_ptr<VariableStore> StoreFor(const std::string& name) const;
  // Every store this ps serves as primary, its own first.
  std::vector<std::shared_ptr<VariableStore>> PrimaryStores() const;

  // One phase of a save (see the file comment). A write's call finishes
  // when the file is durable. Errors: FailedPrecondition without a
  // checkpoint_dir, for another incarnation, or for a WRITE with no snapshot
  // kept; InvalidArgument for a name that is not ckpt-<digits> or a num_ps
  // that does not include this ps; ResourceExhausted past
  // kMaxBackgroundJobs or for a full disk; Unavailable once stopping.
  void Save(const proto::SaveRequest* request, proto::SaveResponse* response, Done done);
  // Streams every shard of the checkpoint, keeping the rows this ps holds,
  // then swaps them in. Errors: as Save, plus InvalidArgument for shard
  // names that are not the manifest's shard-<i>-of-<n>.pst each once,
  // DataLoss for a shard that differs from the manifest or fails its
  // checksums, FailedPrecondition for a checkpoint that does not fit this
  // ps's variables (VariableStore::Restorer).
  void Restore(const proto::RestoreRequest* request, proto::RestoreResponse* response, Done done);

  // Refuses Save and Restore from now on, and waits until every one running
  // has finished its call.
  void StopBackgroundWork();

 private:
  // checkpoint_dir/<name>; errors as Save's for the name.
  absl::StatusOr<std::string> CheckpointPath(const std::string& name) const;
  absl::Status RestoreFrom(const std::string& dir, const proto::RestoreRequest& request,
                           proto::RestoreResponse* response);
  // A shard this ps serves as primary: its own, or a promoted backup copy.
  struct Primary {
    int shard = 0;
    std::shared_ptr<VariableStore> store;
    std::unique_ptr<ReplicaSource> source;
    bool promoted = false;
  };
  // The primary holding variable `name` (this ps's own for a name none holds).
  std::shared_ptr<Primary> PrimaryFor(const std::string& name) const;
  // The primary of `shard` here; null when this ps does not serve it.
  std::shared_ptr<Primary> PrimaryOfShard(int shard) const;
  // Every primary here: own_ while it serves, then the promoted ones.
  std::vector<std::shared_ptr<Primary>> Primaries() const;

  // A snapshot kept for its WRITE: its records, and the store it is of with
  // its number there (VariableStore::Cut::seq; 0: not tracked).
  struct Kept {
    std::shared_ptr<const std::vector<common::ShardRecord>> records;
    std::shared_ptr<VariableStore> store;
    int64_t seq = 0;
  };
  // Takes `store`'s snapshot (copy-on-write for the dense variables with a
  // copy_budget > 0, its tables copied before the instant into files in
  // `spill_dir`: VariableStore::Snapshot; incremental as `request` says)
  // and fills the response's cut and figures. An incremental one with no
  // base sets response->base_unknown and gives no records.
  static absl::StatusOr<Kept> TakeSnapshot(const std::shared_ptr<VariableStore>& store,
                                           const proto::SaveRequest& request,
                                           proto::SaveResponse* response, double copy_budget,
                                           const std::string& spill_dir);

  VariableStore* const store_;
  const Options options_;
  const std::shared_ptr<Primary> own_;
  BackupCopies backups_;
  mutable absl::Mutex primaries_mu_;
  std::vector<std::shared_ptr<Primary>> promoted_ ABSL_GUARDED_BY(primaries_mu_);
  // Whether own_ serves this ps's shard: not once the shard moved to
  // another ps, or is served here by a promoted copy (this ps restarted,
  // its own store lost the shard, and its backup copy here was promoted).
  bool own_serving_ ABSL_GUARDED_BY(primaries_mu_) = true;
  std::atomic<bool> any_promoted_{false};  // !promoted_.empty(), read without the lock
  int64_t roles_version_ ABSL_GUARDED_BY(primaries_mu_) = 0;
  // The snapshots SNAPSHOT phases kept for the WRITEs that follow, by shard.
  absl::Mutex kept_mu_;
  std::map<int, Kept> kept_ ABSL_GUARDED_BY(kept_mu_);
  // Save and Restore calls running on their own threads. Last: destroyed
  // (joined) first.
  BackgroundWork background_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_NODE_PS_NODE_H_
