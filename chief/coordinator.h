// The coordinator's state machine and worker registry. Pure logic: no
// network, and time comes in as an argument, so tests control it.
//
//   INIT ──(variables created on every ps)──> RUNNING ──(all workers done,
//   or stop requested)──> DONE
//   RUNNING ──(a ps lost)──> RECOVERING ──(every ps restored)──> RUNNING
//
// Workers register, send heartbeats with their progress, and report when
// they are done. The global step is the number of updates applied to the
// dense variables (their version), the highest any worker has seen; in SYNC
// mode it takes several pushes to make one.
//
// Each worker has a data position: the batches it has trained on since the
// job began. A worker that restarts (a new incarnation) goes on from the
// position it last reported. Every restore of the ps during training starts
// a new generation: workers learn it from their heartbeats, drop what they
// were doing, and go on from the positions recorded in the checkpoint
// restored. Progress reported from an older generation does not count.
//
// Thread-safety: every method is safe to call concurrently.
#ifndef PST_CHIEF_COORDINATOR_H_
#define PST_CHIEF_COORDINATOR_H_

#include <limits>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/pstrain.pb.h"

namespace pst::chief {

class Coordinator {
 public:
  // `state` holds the plan, ps addresses, worker count and training config;
  // its phase is set to INIT.
  Coordinator(proto::ClusterState state, absl::Duration peer_timeout);

  void SetPhase(proto::Phase phase);
  proto::ClusterState State() const;

  // The generation a restarted chief found the ps in.
  void SetGeneration(int64_t generation);
  // Replicated jobs: where each shard's copies are now (the plan's shards),
  // told to workers in heartbeats; bumps the routing version. Returns it.
  int64_t SetShards(const google::protobuf::RepeatedPtrField<proto::ShardCopies>& shards);
  // Enters RECOVERING and starts a new generation; returns it. Workers that
  // had finished are no longer done: they redo their share since the
  // checkpoint.
  int64_t BeginRecovery();
  // The ps now hold the checkpoint of `step`: the global step becomes
  // `step`, and each worker goes on from positions[i] (kept as they are
  // when `positions` does not have one per worker).
  void ResetProgress(int64_t step, const std::vector<int64_t>& positions);
  // The highest version of a dense variable the ps hold, from the chief's
  // latest probe of every ps. The global step is the highest version the
  // workers report, but never above it: a heartbeat cannot move the job's
  // step past what the ps have applied (a hostile or broken version of
  // INT64_MAX counts as the ps's own). Unset, reports count as they are.
  // Once every worker is done, the probe's version is the step.
  void SetVersionCeiling(int64_t version);
  // The job's final checkpoint is saved, at `step` (ClusterState's
  // final_checkpoint_step): evaluators end once they have evaluated it.
  void SetFinalCheckpointStep(int64_t step);
  // Gives up on a silent worker: it counts as having left early, so the job
  // can finish without it. It may still come back by registering again.
  void GiveUp(int index);

  // The worker index of `claimant` (a replica of a scaled worker service):
  // the one it was given before, else the lowest index no one has claimed
  // and no worker has registered with. Errors: InvalidArgument for an empty
  // claimant; ResourceExhausted when every index is taken (more replicas
  // than TF_CONFIG lists workers).
  absl::StatusOr<int> ClaimWorkerIndex(const std::string& claimant);

  // Errors: InvalidArgument for an index outside [0, num_workers);
  // Unavailable while the phase is INIT or RECOVERING (retry);
  // FailedPrecondition once the job is DONE.
  absl::StatusOr<proto::RegisterResponse> Register(const proto::RegisterRequest& request,
                                                   absl::Time now);

  // Errors: InvalidArgument for a bad index; FailedPrecondition for a worker
  // that never registered; Aborted for a stale incarnation (a worker that
  // has since restarted).
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& request,
                                                     absl::Time now);

  // Errors: as Heartbeat, and Aborted for a report from an older generation
  // (the ps were restored since: the worker must go on from its position).
  absl::Status WorkerDone(const proto::WorkerDoneRequest& request, absl::Time now);

  // From now on every heartbeat answers should_stop.
  void RequestStop(std::string reason);

  // Workers hold at the end of the epochs the chief acts on (ClusterState's
  // checkpoint_every_epochs, eval_every_epochs). The epoch whose end every
  // worker still training holds at, unreleased; 0: not all of them yet.
  int HeldEpochEnd() const;
  // The chief is done with the end of `epoch` (and every earlier one):
  // workers holding there go on (HeartbeatResponse.epochs_released).
  void ReleaseEpoch(int epoch);
  // After a restore: the epochs up to `epoch` count as released, later ones
  // not (the workers hold at their ends again).
  void ResetEpochsReleased(int epoch);

  // The batches the workers train again after the latest restore during
  // training (BeginRecovery, then ResetProgress): for each worker, from its
  // position in the checkpoint up to the position it had reached, as it
  // reports once it follows the restore (HeartbeatRequest.left), or, until
  // it does, as its last heartbeat before the restore said.
  struct Redone {
    int64_t generation = 0;  // the restore's (0: none yet)
    std::vector<int64_t> steps;
    // The figure is final: the worker reported it itself, or left the job.
    std::vector<bool> known;
    // The highest version of the dense variables any worker saw before the
    // restore: the global step the job had reached.
    int64_t step_before = 0;
  };
  Redone StepsRedone() const;

  struct Snapshot {
    proto::Phase phase = proto::PHASE_INIT;
    int64_t generation = 0;
    int64_t global_step = 0;
    int64_t pushes = 0;  // summed over workers
    int64_t examples = 0;
    double loss = 0;  // mean of the workers' latest reported losses
    int epoch = 0;    // highest epoch any worker is in
    // Epochs every worker has completed: the lowest epoch a worker still
    // training is in (a worker that finished counts all of its epochs; one
    // that left early or was given up on does not count).
    int epochs_completed = 0;
    int registered = 0;
    int done = 0;
    int left_early = 0;
    bool all_done = false;
    absl::Time last_done = absl::InfinitePast();  // when a worker last reported done
    std::vector<int> silent;  // registered, not done, no heartbeat for peer_timeout
    std::vector<absl::Duration> silent_for;  // for each of `silent`
    std::vector<int> active;  // not done and not silent (registered or still expected)
    std::vector<int64_t> positions;  // by worker
    // By worker: where its steps went, as it reported when it finished
    // (steps 0: not reported).
    std::vector<proto::StepTimes> step_times;
    // Every worker still training holds at the end of this epoch, waiting
    // for the chief (see HeldEpochEnd); 0: not all of them.
    int epoch_end_held = 0;
    std::vector<int> holding;  // holding at an epoch's end (not in `active`)
  };
  Snapshot Check(absl::Time now) const;

  // Waits until every worker is done or `timeout` passes; true if all done.
  bool WaitAllDone(absl::Duration timeout) const;

  // Waits until every worker heard from within the peer timeout has had a
  // heartbeat answered in PHASE_DONE (so it leaves on its own before the
  // coordinator goes away), or `timeout` passes; true if all have.
  bool WaitStopSeen(absl::Duration timeout) const;

 private:
  struct WorkerState {
    bool registered = false;
    bool done = false;
    bool completed = false;
    bool saw_stop = false;  // a heartbeat was answered in PHASE_DONE
    uint64_t incarnation = 0;
    absl::Time last_seen;
    int64_t steps = 0;  // as reported by the current incarnation
    int64_t earlier_steps = 0;     // of the worker's earlier incarnations
    int64_t earlier_examples = 0;  // likewise
    int64_t version = 0;
    int64_t position = 0;
    int64_t examples = 0;
    float loss = 0;
    bool has_loss = false;
    int epoch = 0;
    int waiting_at_epoch_end = 0;  // as its last heartbeat in this generation said
    // Since the latest restore (Redone): the position and version its last
    // heartbeat before it said, its position in the checkpoint, and what
    // it reported since.
    int64_t position_before_restore = 0;
    int64_t version_before_restore = 0;
    int64_t restored_position = 0;
    int64_t redone = 0;
    bool redone_reported = false;
    proto::StepTimes step_times;  // as its WorkerDone said
  };

  // Finds the registered worker a request is from.
  absl::StatusOr<WorkerState*> FindWorker(int index, uint64_t incarnation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Record(WorkerState* worker, const proto::HeartbeatRequest& progress, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t GlobalStepLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool AllDoneLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int HeldEpochEndLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const absl::Duration peer_timeout_;
  mutable absl::Mutex mu_;
  proto::ClusterState state_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerState> workers_ ABSL_GUARDED_BY(mu_);
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  absl::Time last_done_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restored_generation_ ABSL_GUARDED_BY(mu_) = 0;  // of the latest restore (Redone)
  int epochs_released_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ceiling_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  // Claimant -> the index it was given (ClaimWorkerIndex).
  absl::flat_hash_map<std::string, int> claims_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::chief

#endif  // PST_CHIEF_COORDINATOR_H_
