// The primary side of a replicated shard (PlacementPlan.replicas 2): every
// change to the shard is applied here and forwarded, in the order it was
// applied, to the backup, and its caller is answered only once the backup
// has it. A ps that dies then loses no acknowledged change: its backup holds
// every one.
//
// Changes are applied one at a time (the order lock is held across the
// apply and the numbering), so that the backup, applying them in seq order,
// goes through the same states. Forwards are sent as soon as they are
// numbered, several in flight; the backup puts them back in order.
//
// A backup is whole (it may be promoted) once it holds every change
// answered. A stream that starts with a create (SetBackup) is whole from
// the start. A resync (Resync) starts a stream with the shard's whole state
// (VariableStore::ExportState), taken between two changes, while training
// goes on: until the backup has taken all of it, changes are answered at
// once and forwarded after it, and the backup is whole once it also holds
// those. The state's parts are made as they go (a table with rows on disk
// is read from a cut of it, state_export.h), at most kStateWindow of them
// sent and not yet answered, so that the state is never whole in memory;
// the changes made meanwhile wait here until the backup took it all.
//
// When a forward fails (the backup is gone, or refused it), the backup is
// out of sync and the primary stops forwarding. If the backup was whole (the
// chief may promote it, should this ps be lost), callers are held, their
// changes applied here, until the chief decides: a new stream (Resync, whose
// state holds their changes) or no backup (DropBackup). Otherwise the
// primary goes on alone. Without a backup, Change applies and answers at
// once (holding the order lock shared only, so that a stream that starts
// misses none of them). A backup that answers Aborted was promoted
// in its place (the chief took this primary for lost): this source is
// fenced off, and every caller waiting or to come is answered Unavailable,
// so the workers send their requests to the new primary instead of losing
// them here.
//
// Thread-safe. gRPC-free: the backup is reached through a ReplicaLink.
#ifndef PST_PS_SERVER_REPLICATION_REPLICA_SOURCE_H_
#define PST_PS_SERVER_REPLICATION_REPLICA_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/state_export.h"

namespace pst::ps {

// Sends a shard's changes to the ps holding its backup.
class ReplicaLink {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~ReplicaLink() = default;
  // Sends one change; `done` runs exactly once with the backup's answer,
  // perhaps on another thread, perhaps before Send returns.
  virtual void Send(std::shared_ptr<const proto::ReplicateRequest> request, Done done) = 0;
};

class ReplicaSource {
 public:
  using Done = std::function<void(absl::Status)>;
  // Fills the shard's whole state, as the changes of a new stream.
  using ExportFn = absl::FunctionRef<absl::StatusOr<std::unique_ptr<StateExport>>()>;
  // A resync's parts sent and not yet answered, at most.
  static constexpr int kStateWindow = 4;

  ReplicaSource(int shard, uint64_t incarnation) : shard_(shard), incarnation_(incarnation) {}

  // Starts forwarding to `link`, the backup on ps `backup_ps`, unless a
  // backup in sync is set already (CreateVariables, which names it, is
  // repeated by a restarted chief) and not `restart`. Starting again begins
  // a new stream, numbered 1 again, whose first change must be a create
  // (the backup then starts its copy afresh; every copy is restored from a
  // checkpoint right after). Callers waiting on the old stream are
  // answered.
  void SetBackup(int backup_ps, std::unique_ptr<ReplicaLink> link, bool restart = false);
  // Starts a new stream to `link`, the backup on ps `backup_ps`, with the
  // shard's whole state (`export_state`, called between two changes) as its
  // first changes, and forwards every change after it. Callers waiting on
  // the old stream are answered: the state sent holds their changes. Parts
  // after the first are made (StateExport::Next) on the thread that brings
  // the answer to an earlier one.
  void Resync(int backup_ps, std::unique_ptr<ReplicaLink> link, ExportFn export_state);

  // Whether a backup is set and in sync: whole, and taking every change.
  bool in_sync() const;
  // Whether changes are forwarded to a backup now (in sync, or being
  // resynced): Change's `apply` fills in the change only then.
  bool forwarding() const;
  // Whether forwarding to ps `backup_ps`, in sync or being resynced.
  bool forwarding_to(int backup_ps) const;

  // One change to the shard. `apply` runs under the order lock and returns
  // its status; on OK it fills `change` with what the backup must apply (or
  // leaves it empty when nothing changed: a repeated push). `done` runs
  // exactly once: with apply's error at once, or with OK once the backup
  // holds this change and every one before it (see the file comment for
  // when it is answered sooner, or held).
  void Change(absl::FunctionRef<absl::Status(proto::ReplicateRequest* change)> apply, Done done);

  // Runs `fn` between two changes (the order lock held), with the number of
  // changes sequenced so far: a digest then matches the backup's at the same
  // seq.
  void Quiesced(absl::FunctionRef<void(int64_t seq)> fn) const;

  // Stops forwarding (the backup is gone for good): the callers waiting are
  // answered, and changes apply with no lock of this source's from now on.
  void DropBackup();
  // This shard is no longer served here (the chief moved it): callers
  // waiting, and every change from now on, are answered Unavailable, so
  // that workers send them to the shard's primary, until a new stream
  // starts (SetBackup with restart, before a restore).
  void Moved();
  // This shard was a backup promoted to primary: State reports when it
  // served its first push from then on (NotePushServed).
  void MarkPromoted();
  // A push (dense or by rows) was applied or recognized as a repeat.
  void NotePushServed();

  // For Health.
  void State(proto::ReplicaState* state) const;
  // Whether a backup was ever set (this shard is replicated).
  bool has_backup() const;

 private:
  void Acked(int64_t stream, int64_t seq, const absl::Status& status);
  // Names `request` change `seq` of stream `stream` of this shard, from
  // this incarnation.
  void Address(proto::ReplicateRequest* request, int64_t stream, int64_t seq) const;
  // Sends `request` (of `stream`) on `link`, its answer to Acked.
  void Send(ReplicaLink& link, int64_t stream, std::shared_ptr<proto::ReplicateRequest> request);
  absl::Status FencedError() const;
  // Makes and sends the resync's next parts while fewer than kStateWindow
  // are in flight (one thread at a time; the parts are made outside mu_).
  void SendStateParts();
  // Whether the changes after the stream's start may be sent now: its
  // first change was taken and, in a resync, every part of the state.
  bool ChangesFlowLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return start_taken_ && acked_ >= state_end_;
  }
  // Starts stream stream_ + 1 to `link` (both locks held): the callers
  // waiting go to `answered`.
  void NewStream(int backup_ps, std::unique_ptr<ReplicaLink> link,
                 std::multimap<int64_t, Done>* answered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(order_mu_, mu_);
  // Completes the waiters up to acked_ (all of them once out of sync,
  // unless they are held).
  void Release(std::multimap<int64_t, Done>* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WholeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return acked_ >= whole_at_ && acked_ >= state_end_;
  }

  const int shard_;
  const uint64_t incarnation_;
  // Held across an apply and its numbering (shared by the changes applied
  // with no backup, exclusive otherwise). Before mu_.
  mutable absl::Mutex order_mu_;
  int64_t next_seq_ ABSL_GUARDED_BY(order_mu_) = 1;
  int64_t stream_ ABSL_GUARDED_BY(order_mu_) = 0;

  mutable absl::Mutex mu_;
  int backup_ps_ ABSL_GUARDED_BY(mu_) = -1;
  std::shared_ptr<ReplicaLink> link_ ABSL_GUARDED_BY(mu_);  // null: no backup
  // Every forward of this stream so far was taken (false: out of sync).
  bool forwarding_ ABSL_GUARDED_BY(mu_) = false;
  // The backup was whole at some time in this stream: the chief may have
  // seen it in sync, and promote it.
  bool was_whole_ ABSL_GUARDED_BY(mu_) = false;
  // The last seq of the state a resync sent (0: none), and the highest seq
  // answered before the backup held it: the backup is whole once it has
  // acknowledged both.
  int64_t state_end_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t whole_at_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sequenced_ ABSL_GUARDED_BY(mu_) = 0;
  // Highest seq the backup acknowledged with every one before it; acks
  // received above it.
  int64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t acked_stream_ ABSL_GUARDED_BY(mu_) = 0;  // the stream acks count for
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  std::set<int64_t> acked_ahead_ ABSL_GUARDED_BY(mu_);
  // The backup took the stream's first change (a create, or a state's part
  // 0: what starts its copy). Until then the changes after it are queued
  // here, not sent: they could overtake it, and be refused by a backup
  // with no copy of this stream to keep them for.
  bool start_taken_ ABSL_GUARDED_BY(mu_) = false;
  // Changes waiting for ChangesFlowLocked(): a resync's wait until the
  // backup took every part of the state (sent sooner, they could pile up
  // there past what it keeps waiting, BackupCopies::kMaxAhead).
  std::vector<std::shared_ptr<proto::ReplicateRequest>> queued_ ABSL_GUARDED_BY(mu_);
  // A resync's state, its parts after the first made as the backup takes
  // them (null once every part was made, or the stream ended); the seq of
  // the next part to make, the parts in flight, whether a thread is in
  // SendStateParts' loop (one at a time: the parts are made in order,
  // outside mu_), and the bytes sent so far.
  std::shared_ptr<StateExport> state_ ABSL_GUARDED_BY(mu_);
  int64_t state_next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  int state_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool state_sending_ ABSL_GUARDED_BY(mu_) = false;
  int64_t state_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Callers waiting for the backup to hold seq.
  std::multimap<int64_t, Done> waiting_ ABSL_GUARDED_BY(mu_);
  // Promoted: when the first change was applied (0: none yet; -1: not
  // promoted).
  std::atomic<int64_t> first_change_ms_{-1};
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_REPLICATION_REPLICA_SOURCE_H_
