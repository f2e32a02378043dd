// The job from the chief's side, as plain C++ over its collaborators: the
// ps's control calls (common::PsControl), the coordinator the workers talk
// to (Coordinator), a clock (common::Clock) and the model's evaluation. The
// daemon wires in their gRPC and real versions (chief.cc: RunChief); a test
// wires in-process ones and runs a whole cluster in one process.
//
// The job's life (the coordinator's phase in brackets):
//   Start   [INIT]: create the variables on every ps (idempotent) and decide
//           where training starts: fresh, from the latest checkpoint (a new
//           generation), or, for a restarted chief whose ps kept their
//           state, where the ps are now.
//   Watch   [RUNNING]: every heartbeat interval, probe every ps; save a
//           checkpoint every save_steps/save_secs; keep the ps's membership
//           up to date; give up on silent workers; until every worker is
//           done and every ps answers.
//   Recover [RECOVERING]: a ps that restarted (a new incarnation) or did not
//           answer for peer_timeout is lost: wait for every ps, create the
//           variables again, restore every ps from the latest checkpoint in a
//           new generation, and send the workers back to their positions in
//           it; then Watch again.
//   End     : evaluate and save the final checkpoint (a ps lost now is
//           recovered as above, and the workers finish again), report, then
//           [DONE]: tell the workers, and tell every ps to shut down.
//
// Thread-compatible: Run is called once, on one thread; the collaborators
// are called from it (and from the threads it fans calls out on).
#ifndef PST_CHIEF_JOB_H_
#define PST_CHIEF_JOB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/checkpointing.h"
#include "chief/chief.h"
#include "chief/coordinator.h"
#include "chief/evaluations.h"
#include "chief/ps_peers.h"
#include "chief/replica_view.h"
#include "chief/summary.h"
#include "chief/table_view.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/progress.h"
#include "common/ps_control.h"
#include "proto/pstrain.pb.h"

namespace pst::chief {

// What a job runs: the state every worker receives when it registers (plan,
// ps addresses, worker count, training config), and the SYNC quorum.
struct JobPlan {
  proto::ClusterState initial;
  int quorum = 1;
  // A spec model's initial values from its file, sent only in the create
  // calls (null: every variable takes its initializer).
  InitialValuesFn initial_values;
};

// Plans the placement of options.training over the cluster's ps, and logs
// the mode and the placement; opens a spec model's initial values. Errors:
// InvalidArgument for a quorum larger than the cluster's workers, or the
// plan's own (BuildPlan); those of opening the initial values file
// (models::SpecInitialValues::Open).
absl::StatusOr<JobPlan> PlanJob(const ChiefOptions& options);

// The evaluation and epoch options against the cluster and the model
// (job_evaluation.cc). Errors: InvalidArgument for an evaluator task or
// --checkpoint_every_epochs without --checkpoint_dir, and for
// --eval_every_epochs of a model the chief cannot compute (a spec model)
// without an evaluator task to run the user's evaluation.
absl::Status CheckEvaluationOptions(const ChiefOptions& options);

// Evaluates the model the ps hold now, for the cluster `state`.
using Evaluator = std::function<absl::StatusOr<EvalResult>(const proto::ClusterState& state)>;

class Job {
 public:
  struct Collaborators {
    common::PsControl* ps = nullptr;     // the ps of options.tf.cluster, by index
    Coordinator* coordinator = nullptr;  // serving the workers, built from the plan
    common::Clock* clock = common::RealClock();
    Evaluator evaluate;
    ChiefMetrics* metrics = nullptr;  // null: none
    // Where evaluations are kept (the evaluators' reports reach it through
    // the coordinator service); null: none kept.
    EvaluationHistory* evaluations = nullptr;
    absl::Time job_start;             // for the summary's wall_seconds
  };

  // None of the arguments is owned; all must outlive the Job.
  Job(const ChiefOptions& options, const JobPlan& plan, Collaborators with,
      const common::StopSignal& stop);

  // Runs the job to its end and ends it (see the file comment, and
  // RunChief for the errors). Every ps is told to shut down before it
  // returns, whatever the outcome.
  absl::Status Run();

  const std::vector<RecoveryRecord>& recoveries() const { return recoveries_; }
  const std::vector<FailoverRecord>& failovers() const { return failovers_; }
  const std::vector<ResyncRecord>& resyncs() const { return resyncs_; }
  const std::vector<SaveRecord>& saves() const { return saves_; }
  int given_up() const { return given_up_; }
  absl::Time running_since() const { return running_since_; }
  common::PsControl& control() { return *control_; }
  common::Clock& clock() { return *clock_; }
  TrainingEvents& events() { return events_; }
  const EvaluationHistory* evaluations() const { return evaluations_; }
  const ReplicaView& replicas() const { return replicas_; }

 private:
  // The progress display of --progress: a live line on a terminal, a log
  // line every --log_every_s elsewhere. Ends (the live line with a newline)
  // when destroyed.
  struct ProgressDisplay {
    std::unique_ptr<common::ProgressLine> line;          // null: --progress=off
    std::unique_ptr<common::LogAboveProgressLine> logs;  // log lines above the live one
    common::EtaEstimator eta;
    int64_t total_steps = 0;  // 0: unknown
  };

  // Waits a heartbeat interval; sooner once every worker holds at an
  // epoch's end (ClusterState.checkpoint_every_epochs), so that the pause
  // it costs them is short.
  void AwaitTick();
  // Start to the end of a job that went well (Run adds the ending).
  absl::Status RunToEnd();
  // Creates the variables on every ps and decides where training starts: a
  // fresh job, the latest checkpoint, or (a restarted chief whose ps kept
  // their state) where the ps are now.
  absl::Status Start();
  // Watches until every worker is done and every ps answers with the
  // incarnation it was restored or created in. Called again after a ps
  // lost at the end of the job was recovered.
  absl::Status Watch();
  // After the end of the job failed with `failure` (the evaluation or the
  // final save): whether a ps was lost, in which case it was recovered and
  // the workers went back to redo their steps since the checkpoint. Waits
  // until every ps answers with its known incarnation (false), or one is
  // taken for lost (true).
  absl::StatusOr<bool> RecoverLostPs(const absl::Status& failure);

  // job_evaluation.cc
  // What the epochs completed since the last look call for: a checkpoint,
  // and an evaluation by the chief (--checkpoint_every_epochs,
  // --eval_every_epochs).
  struct EpochsDue {
    bool save = false;
    bool evaluate = false;
    // Every worker holds at the end of this epoch: released once the save
    // and evaluation (if due) are done. 0: none.
    int held = 0;
  };
  EpochsDue CheckEpochs(const Coordinator::Snapshot& snap);
  // The chief's own evaluation during training: logged, written to
  // TensorBoard under eval/ and kept in the history.
  void EvaluateDuringTraining(int epochs_completed);
  // The final checkpoint is saved at `step`: tells the evaluators, and waits
  // (--evaluator_wait_s) for each to report it.
  void AwaitEvaluators(int64_t step);

  // job_progress.cc
  ProgressDisplay StartProgress();
  // `final`: the job is done; shown whatever --log_every_s, and the live
  // line ends.
  void ShowProgress(const Coordinator::Snapshot& snap, absl::Time now, ProgressDisplay* progress,
                    bool final = false);

  int VariablesOn(int ps_index) const;
  // CreateVariables on every ps in parallel (idempotent: a ps that kept its
  // variables creates none).
  // `restoring`: every copy is restored right after (CreatePlanOnPs).
  absl::Status CreateEverywhere(absl::Time deadline, std::vector<absl::StatusOr<int>>* created,
                                bool restoring = false);
  absl::Status LostWithoutCheckpoint(const std::string& cause) const;
  void ApplyRestored(const proto::CheckpointManifest& manifest);
  // The latest recovery's batches trained again, as the workers report them
  // (Coordinator::StepsRedone): into its record and the metrics, and
  // logged once every worker has reported.
  void NoteStepsRedone();
  void RecordSave(const SaveFigures& figures, int64_t pushes_before, absl::Time start);
  // Probes every ps; describes the first one lost, if any, and sets
  // `*lost_ps` (when given) to its index. Sets `*every_ps_answered` (when
  // given) to whether each answered this time. In a replicated job a ps
  // that holds no copy any more (its shards moved) is not looked at.
  std::optional<std::string> FindLostPs(absl::Time now, bool* every_ps_answered = nullptr,
                                        int* lost_ps = nullptr);
  // Replicated jobs: ps `lost` is gone (`cause`). When every shard whose
  // primary it was has a backup in sync on a ps that answers, promotes
  // those backups (SetRoles on every ps, the new routes to the workers)
  // and returns true: no restore, no rewind. A ps that holds no copy any
  // more is simply taken back. Returns false, changing nothing, when some
  // shard of it has no such backup: the caller restores from a checkpoint.
  absl::StatusOr<bool> FailOver(int lost, const std::string& cause, int64_t step_before);
  // Replicated jobs, before the variables are created: where the ps that
  // answer hold each shard's copies now (a restarted chief after a
  // failover), taken as the layout (and told to every ps that holds a copy)
  // when it differs from the plan's.
  void LearnLayout();
  // Replicated jobs, while training: gives every shard without a backup
  // one (the plan's backup ps if it answers, else its plan's primary, else
  // any other ps that answers), and has each primary whose backup answers
  // but does not take its changes send it the shard whole while training
  // goes on (SetRoles with resync, to the new backups first). A shard asked
  // for lately is left to settle.
  void MendBackups(absl::Time now);
  // Whether ps `ps` holds a copy of some shard in the current layout.
  bool HoldsACopy(int ps) const;
  // Fills the first change of each promoted shard in the failover records
  // from a ps's Health.
  void NoteFirstChanges(int ps, const proto::HealthResponse& health);
  // initial_ with the current layout of the shards.
  proto::ClusterState CurrentState() const;
  // RUNNING -> RECOVERING -> RUNNING: waits for every ps to answer, creates
  // the variables of the restarted ones, restores every ps from the latest
  // checkpoint (a consistent cut), and sends the workers back to their
  // positions in it. Replicated jobs (both copies of a shard lost): every
  // shard goes back to its own ps, with its backup forwarded to again, and
  // every copy is restored.
  absl::Status Recover(const std::string& cause, int64_t step_before);
  void SendMembership(const std::vector<int>& active);
  // job_failover.cc
  // Replicated jobs, at the end: reads every copy's digest and logs which
  // backups equal their primary.
  void CheckReplicas();

  const ChiefOptions& options_;
  const common::Timing& timing_;
  const common::StopSignal& stop_;
  Coordinator* const coordinator_;
  const proto::ClusterState& initial_;
  const int quorum_;
  const InitialValuesFn initial_values_;
  common::PsControl* const control_;
  common::Clock* const clock_;
  const Evaluator evaluate_;
  ChiefMetrics* const metrics_;  // null without --metrics_port
  EvaluationHistory* const evaluations_;  // null: none kept
  int epochs_seen_ = 0;  // epochs every worker had completed, at the last look
  // The workers hold at the ends of the epochs the chief acts on.
  bool holds_at_epoch_ends_ = false;
  const absl::Time job_start_;
  std::vector<PsPeer> ps_;
  // The last full save, and the last save of either kind (incremental
  // ones are due counting from either).
  int64_t last_saved_step_ = 0;
  absl::Time last_save_time_;
  int64_t last_any_save_step_ = 0;
  absl::Time last_any_save_time_;
  // The last link of the current chain (incremental saves): the checkpoint
  // the next incremental save is on; "": none, the next save is full.
  std::string chain_head_;
  absl::Time running_since_ = absl::InfinitePast();
  std::vector<int> active_;  // workers taking part, as last told to the ps
  bool membership_stale_ = false;
  std::vector<RecoveryRecord> recoveries_;
  int given_up_ = 0;
  // Throughput around saves: the busiest ps's pushes_applied at the last
  // probe, and at the end of the last save (-1: not yet known).
  int64_t probed_pushes_ = 0;
  int64_t after_save_pushes_ = -1;
  absl::Time after_save_time_;
  std::vector<SaveRecord> saves_;
  // TensorBoard (--summary_dir), and the busiest ps's applied gradients and
  // their summed staleness, at the last probe.
  TrainingEvents events_;
  int64_t probed_applied_ = 0;
  int64_t probed_staleness_sum_ = 0;
  ReplicaView replicas_;
  TableView tables_;  // the hash tables' figures, for the progress line
  // The plan with each shard's copies where they are now (the plan's own
  // until a failover), and the version of the layout last told to the ps.
  proto::PlacementPlan layout_;
  int64_t roles_version_ = 0;
  std::vector<FailoverRecord> failovers_;
  std::vector<ResyncRecord> resyncs_;
  // When each shard's backup was last mended (InfinitePast: never).
  std::vector<absl::Time> mended_at_;
};

}  // namespace pst::chief

#endif  // PST_CHIEF_JOB_H_
