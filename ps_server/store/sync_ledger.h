// The training mode's bookkeeping on one ps (VariableStore's SyncConfig):
// the config itself (set by the first Create), the active workers and the
// SYNC quorum (SetMembership), each worker's SSP clock and data position,
// the last push step of each (worker, part) that recognizes a retried push,
// and the pulls parked until the version or clock they wait for comes.
//
// It holds no variable: whether a SYNC pull's version is reached is asked
// of the caller, through a VersionsReached callback that runs with the
// ledger's mutex held (so that a check and a park are one step, and a push
// that makes the pull ready, then wakes the parked ones, cannot slip in
// between). Parked calls are handed back to the caller to complete: no
// Done runs under the mutex.
//
// Thread-safety: thread-safe; one mutex guards everything but quorum()
// (an atomic, read by pushes under a variable's lock). Lock order:
// VariableStore's mu_, then this mutex, then a Variable's mu (taken only
// by the VersionsReached callback). It calls nothing else while holding
// its mutex.
#ifndef PST_PS_SERVER_STORE_SYNC_LEDGER_H_
#define PST_PS_SERVER_STORE_SYNC_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/pstrain.pb.h"

namespace pst::ps {

class SyncLedger {
 public:
  // Completion callback of a parked call; runs exactly once.
  using Done = std::function<void(absl::Status)>;
  // A parked pull.
  struct Waiter {
    uint64_t ticket = 0;
    proto::PullRequest request;
    proto::PullResponse* response = nullptr;
    Done done;
    absl::Time since;
  };
  // SYNC: whether every variable `request` names (every dense one, if none)
  // has reached request.min_version(). Runs with the ledger's mutex held.
  using VersionsReached = absl::FunctionRef<bool(const proto::PullRequest& request)>;

  // `max_workers`: worker indices accepted while the config names no
  // num_workers. `max_parked`: pulls parked at once.
  SyncLedger(int32_t max_workers, int64_t max_parked);
  SyncLedger(const SyncLedger&) = delete;
  SyncLedger& operator=(const SyncLedger&) = delete;

  // ---- The config.
  // Errors: InvalidArgument for a config that is wrong in itself;
  // FailedPrecondition when another config is set already.
  absl::Status CheckConfig(const proto::SyncConfig& sync) const ABSL_LOCKS_EXCLUDED(mu_);
  // Sets `sync` (checked) unless a config is set: every worker active, the
  // quorum replicas_to_aggregate, or every worker.
  void SetConfigOnce(const proto::SyncConfig& sync) ABSL_LOCKS_EXCLUDED(mu_);
  proto::SyncConfig config() const ABSL_LOCKS_EXCLUDED(mu_);
  proto::SyncMode mode() const ABSL_LOCKS_EXCLUDED(mu_);
  // SYNC: pushes of a version applied together.
  int quorum() const { return quorum_.load(); }

  // ---- Workers and pushes.
  // InvalidArgument unless `worker` is a worker of this job ([0,
  // num_workers), or [0, max_workers) without one); -1 (not a worker: the
  // chief's evaluation) passes when `allow_none`.
  absl::Status CheckWorker(int32_t worker, bool allow_none) const ABSL_LOCKS_EXCLUDED(mu_);
  // A dense push arrives: checks the worker and returns the mode. Outside
  // SYNC (which recognizes repeats per variable version), a push with an
  // incarnation is a repeat, `*duplicate`, when its (worker, part) pushed
  // this step or a later one in that incarnation; else its step is
  // recorded.
  absl::StatusOr<proto::SyncMode> BeginDensePush(int32_t worker, int32_t part,
                                                 uint64_t incarnation, int64_t step,
                                                 bool* duplicate) ABSL_LOCKS_EXCLUDED(mu_);
  // A row push arrives: as BeginDensePush for the worker's row pushes (kept
  // under part 0), `*mode` set to the mode. Returns whether it repeats one;
  // never in SYNC, which recognizes repeats per step (RowAggregate) and
  // records nothing here.
  absl::StatusOr<bool> BeginRowPush(int32_t worker, uint64_t incarnation, int64_t step,
                                    proto::SyncMode* mode) ABSL_LOCKS_EXCLUDED(mu_);
  // A dense push was taken (applied, aggregated, a repeat or too late):
  // SSP moves the worker's clock to step + 1; a position >= 0 is the
  // worker's data position, kept as position + 1.
  void EndDensePush(proto::SyncMode mode, int32_t worker, int64_t step, int64_t position)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the active workers and the quorum (lowered to their number).
  // Errors: InvalidArgument for a worker out of range or a quorum < 1.
  absl::Status SetMembership(const proto::MembershipRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- Parked pulls.
  // Checks the worker, then whether `request` may be served now (SYNC:
  // `reached`; SSP: its clock within staleness of the slowest active
  // worker, the gap recorded). Returns 0 when it may (the caller serves
  // it), or parks it and returns its ticket, `*done` moved into the waiter.
  // Errors (nothing parked): CheckWorker's; ResourceExhausted when
  // max_parked pulls are parked already.
  absl::StatusOr<uint64_t> ParkUnlessReady(const proto::PullRequest& request,
                                           proto::PullResponse* response, Done* done,
                                           VersionsReached reached) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes and returns the parked pulls that may be served now.
  std::vector<Waiter> TakeReady(VersionsReached reached) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a parked pull; whether it was parked.
  bool Cancel(uint64_t ticket) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes and returns every parked pull.
  std::vector<Waiter> TakeAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Removes and returns the pulls parked longer than `max_wait`.
  std::vector<Waiter> TakeExpired(absl::Duration max_wait) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- Checkpoints and state transfer.
  // What the recorded pushes say of each worker (VariableStore::Cut), by
  // worker index.
  std::vector<proto::WorkerCut> Cut() const ABSL_LOCKS_EXCLUDED(mu_);
  // After a restore: clocks back to 0, pushes and positions forgotten.
  // Returns the parked pulls (they waited for the replaced state).
  std::vector<Waiter> Reset() ABSL_LOCKS_EXCLUDED(mu_);
  // Quorum, membership, clocks, pushes and positions into `mode` (not its
  // generation), and back. Load errors: InvalidArgument when the worker
  // counts differ from this config's, or the quorum is < 1.
  void Export(proto::StoreModeState* mode) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Load(const proto::StoreModeState& mode) ABSL_LOCKS_EXCLUDED(mu_);

  struct Figures {
    int64_t parked_pulls = 0;   // ever parked
    double parked_seconds = 0;  // summed, those still parked included
    int64_t max_clock_gap = 0;  // SSP
    // Worker -> data position after its last dense push.
    absl::flat_hash_map<int32_t, int64_t> positions;
  };
  Figures GetFigures() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool ReadyLocked(const proto::PullRequest& request, VersionsReached reached)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckWorkerLocked(int32_t worker, bool allow_none) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int64_t MinActiveClockLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes and returns the waiters `take` picks, adding their time parked.
  template <typename Pred>
  std::vector<Waiter> TakeLocked(absl::Time now, Pred take) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t max_workers_;
  const int64_t max_parked_;

  mutable absl::Mutex mu_;
  proto::SyncConfig sync_ ABSL_GUARDED_BY(mu_);
  bool sync_set_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> quorum_{1};
  std::vector<bool> active_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  // (worker, part) -> its incarnation's last dense push step (of that
  // PushRequest.part) and last row push step (kept under part 0).
  struct PushKey {
    uint64_t incarnation = 0;
    int64_t dense_step = -1;
    int64_t rows_step = -1;
  };
  absl::flat_hash_map<std::pair<int32_t, int32_t>, PushKey> last_push_ ABSL_GUARDED_BY(mu_);
  // Worker -> data position after its last dense push (PushRequest.position).
  absl::flat_hash_map<int32_t, int64_t> positions_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t parked_pulls_ ABSL_GUARDED_BY(mu_) = 0;
  double parked_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_clock_gap_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_SYNC_LEDGER_H_
