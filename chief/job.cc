#include "chief/job.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "models/model_spec.h"
#include "models/spec_model.h"

namespace pst::chief {

absl::StatusOr<JobPlan> PlanJob(const ChiefOptions& options) {
  const common::ClusterSpec& cluster = options.tf.cluster;
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan plan,
                       models::BuildPlan(options.training, static_cast<int>(cluster.ps.size())));
  JobPlan job;
  proto::ClusterState& initial = job.initial;
  *initial.mutable_plan() = plan;
  for (const std::string& address : cluster.ps) initial.add_ps_addresses(address);
  initial.set_num_workers(static_cast<int>(cluster.worker.size()));
  *initial.mutable_training() = options.training;
  // The epochs' ends the chief acts on: the workers hold there for it.
  if (!options.checkpoint_dir.empty()) {
    initial.set_checkpoint_every_epochs(std::max(0, options.checkpoint_every_epochs));
  }
  initial.set_eval_every_epochs(std::max(0, options.eval_every_epochs));
  proto::SyncConfig* sync = initial.mutable_training()->mutable_sync();
  sync->set_num_workers(static_cast<int>(cluster.worker.size()));
  if (sync->replicas_to_aggregate() > sync->num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas_to_aggregate=", sync->replicas_to_aggregate(), " exceeds the ",
                     sync->num_workers(), " worker(s) in the cluster"));
  }
  const int quorum =
      sync->replicas_to_aggregate() > 0 ? sync->replicas_to_aggregate() : sync->num_workers();
  job.quorum = quorum;
  PST_RETURN_IF_ERROR(CheckEvaluationOptions(options));
  PST_ASSIGN_OR_RETURN(std::shared_ptr<const models::SpecInitialValues> values,
                       models::SpecInitialValues::Open(options.training));
  if (values != nullptr) {
    job.initial_values = [values](const proto::VariableSpec& entry) {
      return values->ValuesFor(entry);
    };
  }
  spdlog::info("mode {}{}", absl::AsciiStrToLower(proto::SyncMode_Name(sync->mode())),
               sync->mode() == proto::SYNC ? absl::StrCat(": ", quorum, " of ", sync->num_workers(),
                                                          " gradients averaged per step")
               : sync->mode() == proto::SSP ? absl::StrCat(": staleness ", sync->staleness())
                                            : std::string());
  const std::vector<int64_t> bytes = common::BytesPerPs(plan);
  spdlog::info("placement ({}): {} variable(s) over {} ps, bytes per ps: [{}]", plan.policy(),
               plan.variables_size(), plan.num_ps(), absl::StrJoin(bytes, ", "));
  return job;
}

Job::Job(const ChiefOptions& options, const JobPlan& plan, Collaborators with,
         const common::StopSignal& stop)
    : options_(options),
      timing_(options.timing),
      stop_(stop),
      coordinator_(with.coordinator),
      initial_(plan.initial),
      quorum_(plan.quorum),
      initial_values_(plan.initial_values),
      control_(with.ps),
      clock_(with.clock),
      evaluate_(std::move(with.evaluate)),
      metrics_(with.metrics),
      evaluations_(with.evaluations),
      job_start_(with.job_start),
      replicas_(plan.initial.plan()),
      layout_(plan.initial.plan()),
      mended_at_(plan.initial.plan().shards_size(), absl::InfinitePast()) {
  if (metrics_ != nullptr) metrics_->WatchReplicas(&replicas_);
  holds_at_epoch_ends_ =
      initial_.checkpoint_every_epochs() > 0 || initial_.eval_every_epochs() > 0;
  const common::ClusterSpec& cluster = options.tf.cluster;
  ps_.resize(cluster.ps.size());
  for (size_t i = 0; i < ps_.size(); ++i) ps_[i].address = cluster.ps[i];
}

absl::Status Job::Run() {
  absl::Status status = RunToEnd();
  coordinator_->SetPhase(proto::PHASE_DONE);
  coordinator_->RequestStop(status.ok() ? "job done" : std::string(status.message()));
  // Workers that finished their share wait for this answer before exiting;
  // give each live one a heartbeat or two to hear it.
  if (!coordinator_->WaitStopSeen(2 * timing_.heartbeat_interval + absl::Seconds(1))) {
    spdlog::warn("not every worker heard that the job ended; stopping anyway");
  }
  ShutdownAllPs(*control_,
                status.ok() ? "job done" : absl::StrCat("job failed: ", status.message()));
  return status;
}

absl::Status Job::RunToEnd() {
  const common::ClusterSpec& cluster = options_.tf.cluster;
  PST_RETURN_IF_ERROR(Start());
  events_.Open(options_.summary_dir);
  coordinator_->SetPhase(proto::PHASE_RUNNING);
  spdlog::info("variables ready; waiting for {} worker(s)", cluster.worker.size());
  Coordinator::Snapshot final_snap;
  EvalResult eval;
  for (;;) {
    PST_RETURN_IF_ERROR(Watch());
    final_snap = coordinator_->Check(clock_->Now());
    if (final_snap.left_early == static_cast<int>(cluster.worker.size())) {
      return absl::AbortedError("every worker left before finishing; see their logs");
    }
    spdlog::info("every worker has finished at global step {}: evaluating{}",
                 final_snap.global_step,
                 options_.checkpoint_dir.empty() ? "" : " and saving the final checkpoint");
    absl::Status finished = [&]() -> absl::Status {
      PST_ASSIGN_OR_RETURN(eval, evaluate_(coordinator_->State()));
      if (options_.checkpoint_dir.empty()) return absl::OkStatus();
      // Full, so that the final checkpoint stands alone.
      SaveKind full;
      full.track_changes = options_.incremental();
      return SaveCheckpoint(*control_, ps_, options_, coordinator_->State(), eval.global_step,
                            final_snap.positions, final_snap.epochs_completed, 0, full)
          .status();
    }();
    if (finished.ok()) break;
    // A ps lost now is recovered as during training: the restore takes
    // back the workers' last steps, so they redo them and finish again.
    PST_ASSIGN_OR_RETURN(const bool recovered, RecoverLostPs(finished));
    if (!recovered) return finished;
  }
  if (!options_.checkpoint_dir.empty()) AwaitEvaluators(eval.global_step);
  CheckReplicas();
  NoteStepsRedone();
  return ReportJob(*this, options_, initial_, eval, final_snap, job_start_);
}

absl::Status Job::Start() {
  LearnLayout();
  std::vector<absl::StatusOr<int>> created(ps_.size(), 0);
  PST_RETURN_IF_ERROR(CreateEverywhere(clock_->Now() + timing_.startup_timeout, &created));
  int64_t max_generation = 0, min_generation = INT64_MAX;
  bool some_kept = false, some_lost = false;
  for (size_t i = 0; i < ps_.size(); ++i) {
    PST_ASSIGN_OR_RETURN(proto::HealthResponse health,
                         ProbePs(*control_, static_cast<int>(i), absl::Seconds(5)));
    ps_[i].incarnation = health.incarnation();
    ps_[i].last_ok = clock_->Now();
    max_generation = std::max(max_generation, health.generation());
    min_generation = std::min(min_generation, health.generation());
    const int expected = VariablesOn(static_cast<int>(i));
    if (expected > 0 && *created[i] == 0) some_kept = true;
    if (expected > 0 && *created[i] > 0) some_lost = true;
    spdlog::info("{} at {} holds {} variable(s), {} element(s){}", health.task(), ps_[i].address,
                 health.num_variables(), health.num_elements(),
                 expected > 0 && *created[i] == 0
                     ? absl::StrCat(", kept from before (at version ", health.max_version(),
                                    ", generation ", health.generation(), ")")
                     : std::string());
  }
  if (some_kept && !some_lost && min_generation == max_generation) {
    // A restarted chief: the ps kept everything. Go on where they are;
    // live workers tell where they are when they register again.
    coordinator_->SetGeneration(max_generation);
    const std::vector<std::string> saved = common::ListCheckpoints(options_.checkpoint_dir);
    if (!saved.empty()) {
      absl::StatusOr<proto::CheckpointManifest> latest = common::ReadManifest(saved.front());
      if (latest.ok()) last_saved_step_ = last_any_save_step_ = latest->global_step();
      // The ps may still note changes since it (else the save is full).
      if (options_.incremental()) {
        chain_head_ = std::filesystem::path(saved.front()).filename().string();
      }
    }
    spdlog::info("every ps kept its state: going on from there (generation {}), no restore",
                 max_generation);
    return absl::OkStatus();
  }
  const int64_t generation = some_kept ? max_generation + 1 : 0;
  coordinator_->SetGeneration(generation);
  if (options_.checkpoint_dir.empty()) {
    if (some_kept) return LostWithoutCheckpoint("a ps restarted while the chief was down");
    return absl::OkStatus();
  }
  if (replicas_.enabled() && !common::ListCheckpoints(options_.checkpoint_dir).empty()) {
    // Every copy is restored next: each primary forwards to its backup
    // afresh (a backup may have been lost with the chief).
    PST_RETURN_IF_ERROR(CreateEverywhere(clock_->Now() + timing_.startup_timeout, &created,
                                         /*restoring=*/true));
  }
  PST_ASSIGN_OR_RETURN(std::optional<proto::CheckpointManifest> manifest,
                       RestoreLatest(*control_, ps_, options_, generation, CurrentState()));
  if (!manifest.has_value()) {
    if (some_kept) return LostWithoutCheckpoint("a ps restarted while the chief was down");
    return absl::OkStatus();
  }
  ApplyRestored(*manifest);
  return absl::OkStatus();
}

absl::Status Job::Watch() {
  const common::ClusterSpec& cluster = options_.tf.cluster;
  if (running_since_ == absl::InfinitePast()) {
    running_since_ = clock_->Now();
    last_save_time_ = last_any_save_time_ = running_since_;
  }
  ProgressDisplay progress = StartProgress();
  for (;;) {
    AwaitTick();
    const absl::Time now = clock_->Now();
    if (stop_.stopped()) {
      coordinator_->RequestStop(stop_.reason());
      coordinator_->WaitAllDone(absl::Seconds(5));
      return absl::CancelledError(stop_.reason());
    }
    Coordinator::Snapshot snap = coordinator_->Check(now);

    // A ps that restarted (a new incarnation) lost its variables; one
    // unreachable for --peer_timeout_s is taken for lost. Looked for
    // before the job may end too: the workers' last steps are on the ps.
    bool every_ps_answered = false;
    int lost_ps = -1;
    std::optional<std::string> lost = FindLostPs(now, &every_ps_answered, &lost_ps);
    if (lost.has_value()) {
      PST_ASSIGN_OR_RETURN(const bool failed_over, FailOver(lost_ps, *lost, snap.global_step));
      if (!failed_over) PST_RETURN_IF_ERROR(Recover(*lost, snap.global_step));
      continue;
    }
    NoteStepsRedone();
    MendBackups(now);
    if (snap.all_done) {
      if (!every_ps_answered) continue;  // until it answers, or is taken for lost
      // The step as every ps just answered: the workers' last pushes in.
      snap = coordinator_->Check(now);
      ShowProgress(snap, now, &progress, /*final=*/true);
      return absl::OkStatus();
    }
    const EpochsDue epochs_due = CheckEpochs(snap);
    // Every worker holds at an epoch's end, its last pushes applied: the
    // global step as the ps just answered (the probe above).
    if (epochs_due.held > 0) snap = coordinator_->Check(clock_->Now());
    const int epochs_completed = epochs_due.held > 0 ? epochs_due.held : snap.epochs_completed;
    if (epochs_due.evaluate) EvaluateDuringTraining(epochs_completed);
    const bool full_due =
        (options_.save_steps > 0 && snap.global_step >= last_saved_step_ + options_.save_steps) ||
        (options_.save_secs > 0 && now - last_save_time_ >= absl::Seconds(options_.save_secs)) ||
        epochs_due.save;
    const bool incremental_due =
        (options_.incremental_save_steps > 0 &&
         snap.global_step >= last_any_save_step_ + options_.incremental_save_steps) ||
        (options_.incremental_save_secs > 0 &&
         now - last_any_save_time_ >= absl::Seconds(options_.incremental_save_secs));
    if (!options_.checkpoint_dir.empty() && (full_due || incremental_due)) {
      const int64_t pushes_before = probed_pushes_;
      const absl::Time save_start = clock_->Now();
      SaveKind kind;
      kind.track_changes = options_.incremental();
      if (!full_due) kind.base = chain_head_;  // none yet: full
      absl::StatusOr<SaveFigures> saved =
          SaveCheckpoint(*control_, ps_, options_, coordinator_->State(), snap.global_step,
                         snap.positions, epochs_completed, epochs_due.held, kind);
      last_any_save_time_ = clock_->Now();
      if (full_due || (saved.ok() && !saved->incremental)) last_save_time_ = last_any_save_time_;
      if (saved.ok()) {
        last_any_save_step_ = snap.global_step;
        if (!saved->incremental) last_saved_step_ = snap.global_step;
        if (kind.track_changes) chain_head_ = saved->name;
        RecordSave(*saved, pushes_before, save_start);
      } else {
        // A ps lost in the middle of a save: the next look at the ps
        // starts the recovery, from the previous checkpoint.
        spdlog::warn("checkpoint at step {} not saved: {}", snap.global_step,
                     saved.status().message());
      }
    }
    // A worker that finished, left or fell silent no longer counts: lower
    // the SYNC quorum and drop it from SSP's slowest clock, so nobody
    // waits for it. It counts again when it comes back.
    if (epochs_due.held > 0) {
      // Those holding train again: the ps count them in before they push.
      std::vector<int> going_on = snap.active;
      going_on.insert(going_on.end(), snap.holding.begin(), snap.holding.end());
      std::sort(going_on.begin(), going_on.end());
      if (going_on != active_ || membership_stale_) SendMembership(going_on);
      coordinator_->ReleaseEpoch(epochs_due.held);
      snap.active = going_on;
    }
    if (snap.active != active_ || membership_stale_) SendMembership(snap.active);
    for (size_t k = 0; k < snap.silent.size(); ++k) {
      const int w = snap.silent[k];
      if (snap.silent_for[k] > timing_.recovery_timeout) {
        spdlog::warn("worker {} sent no heartbeat for {}: giving up on it (--recovery_timeout_s)",
                     w, absl::FormatDuration(snap.silent_for[k]));
        coordinator_->GiveUp(w);
        ++given_up_;
      }
    }
    if (snap.registered < static_cast<int>(cluster.worker.size()) &&
        now - running_since_ > timing_.startup_timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("only ", snap.registered, " of ", cluster.worker.size(),
                       " worker(s) registered within --startup_timeout_s"));
    }
    if (events_.open() && snap.global_step >= events_.last_step() + options_.summary_steps) {
      events_.Write(snap, now, probed_applied_, probed_staleness_sum_,
                    common::ScheduledRate(options_.training.optimizer(), snap.global_step));
    }
    ShowProgress(snap, now, &progress);
  }
}

absl::StatusOr<bool> Job::RecoverLostPs(const absl::Status& failure) {
  for (;;) {
    const absl::Time now = clock_->Now();
    bool every_ps_answered = false;
    int lost_ps = -1;
    std::optional<std::string> lost = FindLostPs(now, &every_ps_answered, &lost_ps);
    if (lost.has_value()) {
      spdlog::warn("the end of the job failed ({}), and {}", failure.message(), *lost);
      const int64_t step = coordinator_->Check(now).global_step;
      PST_ASSIGN_OR_RETURN(const bool failed_over, FailOver(lost_ps, *lost, step));
      if (!failed_over) PST_RETURN_IF_ERROR(Recover(*lost, step));
      return true;
    }
    if (every_ps_answered) return false;
    if (clock_->WaitFor(timing_.heartbeat_interval, stop_)) {
      return absl::CancelledError(stop_.reason());
    }
  }
}

int Job::VariablesOn(int ps_index) const {
  int n = 0;
  for (const auto& entry : initial_.plan().variables()) n += entry.ps_index() == ps_index;
  return n;
}

absl::Status Job::CreateEverywhere(absl::Time deadline, std::vector<absl::StatusOr<int>>* created,
                                   bool restoring) {
  // Each shard on the ps serving it now (shard i on ps i until a failover).
  const proto::ClusterState state = CurrentState();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ps_.size(); ++i) {
    const int target = common::PrimaryOf(layout_, static_cast<int>(i));
    threads.emplace_back([&, i, target] {
      (*created)[i] = CreatePlanOnPs(*control_, static_cast<int>(i), target, ps_[target].address,
                                     state, initial_values_, deadline, *clock_, stop_, restoring);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::StatusOr<int>& c : *created) PST_RETURN_IF_ERROR(c.status());
  return absl::OkStatus();
}

absl::Status Job::LostWithoutCheckpoint(const std::string& cause) const {
  return absl::DataLossError(absl::StrCat(
      cause, ", and there is no checkpoint to restore the ps from",
      options_.checkpoint_dir.empty()
          ? " (run with --checkpoint_dir and --save_checkpoints_steps or _secs to make them)"
          : absl::StrCat(" in ", options_.checkpoint_dir)));
}

void Job::ApplyRestored(const proto::CheckpointManifest& manifest) {
  std::vector<int64_t> positions(manifest.worker_positions().begin(),
                                 manifest.worker_positions().end());
  if (positions.size() != options_.tf.cluster.worker.size()) {
    spdlog::warn(
        "the checkpoint has data positions for {} worker(s), this job has {}: every worker "
        "starts its data from the beginning",
        positions.size(), options_.tf.cluster.worker.size());
    positions.assign(options_.tf.cluster.worker.size(), 0);
  }
  coordinator_->ResetProgress(manifest.global_step(), positions);
  last_saved_step_ = last_any_save_step_ = manifest.global_step();
  chain_head_.clear();  // the ps note no changes since a restore
  // The epochs' ends after the checkpoint are held at, and acted on, again.
  const int epochs = std::max(manifest.epochs_completed(), manifest.closes_epoch());
  coordinator_->ResetEpochsReleased(epochs);
  epochs_seen_ = epochs;
}

void Job::RecordSave(const SaveFigures& figures, int64_t pushes_before, absl::Time start) {
  if (figures.bytes == 0) return;  // that step was saved already
  if (metrics_ != nullptr) metrics_->Saved(figures.seconds);
  SaveRecord record;
  record.figures = figures;
  if (figures.seconds > 0) {
    record.pushes_per_sec_during = figures.pushes_during / figures.seconds;
  }
  const double between = absl::ToDoubleSeconds(start - after_save_time_);
  // Without a push seen since the last save (or the first look at the ps,
  // made just before a first save) there is nothing to compare with.
  if (after_save_pushes_ >= 0 && between > 0 && pushes_before > after_save_pushes_) {
    record.pushes_per_sec_between = (pushes_before - after_save_pushes_) / between;
    spdlog::info(
        "training during the save: {:.0f} pushes/s; between saves: {:.0f} pushes/s "
        "({:.2f}x)",
        record.pushes_per_sec_during, record.pushes_per_sec_between,
        record.pushes_per_sec_between > 0
            ? record.pushes_per_sec_during / record.pushes_per_sec_between
            : 0.0);
  }
  after_save_pushes_ = pushes_before + figures.pushes_during;
  after_save_time_ = clock_->Now();
  saves_.push_back(record);
}

std::optional<std::string> Job::FindLostPs(absl::Time now, bool* every_ps_answered, int* lost_ps) {
  std::vector<absl::StatusOr<proto::HealthResponse>> health(ps_.size(),
                                                            absl::UnknownError("not probed"));
  ForEachPs(ps_.size(), [&](size_t i) {
    if (!HoldsACopy(static_cast<int>(i))) {
      // Its shards moved: nothing of the job is there to lose. Counts as
      // answered, as it was last known.
      proto::HealthResponse unprobed;
      unprobed.set_incarnation(ps_[i].incarnation);
      health[i] = std::move(unprobed);
      return absl::OkStatus();
    }
    health[i] =
        ProbePs(*control_, static_cast<int>(i), timing_.heartbeat_interval + absl::Seconds(1));
    return absl::OkStatus();
  }).IgnoreError();
  if (every_ps_answered != nullptr) {
    *every_ps_answered =
        std::all_of(health.begin(), health.end(), [](const auto& h) { return h.ok(); });
  }
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (lost_ps != nullptr) *lost_ps = static_cast<int>(i);
    if (health[i].ok() && health[i]->incarnation() != ps_[i].incarnation) {
      return absl::StrCat("ps ", i, " at ", ps_[i].address,
                          " restarted (a new incarnation) and lost its variables");
    }
    if (health[i].ok() && HoldsACopy(static_cast<int>(i))) {
      replicas_.Update(static_cast<int>(i), *health[i]);
      NoteFirstChanges(static_cast<int>(i), *health[i]);
    }
    if (health[i].ok()) {
      probed_pushes_ = std::max(probed_pushes_, health[i]->pushes_applied());
      if (health[i]->gradients_applied() > probed_applied_) {
        probed_applied_ = health[i]->gradients_applied();
        probed_staleness_sum_ = health[i]->staleness_sum();
      }
      ps_[i].last_ok = now;
    } else if (now - ps_[i].last_ok > timing_.peer_timeout) {
      return absl::StrCat("ps ", i, " at ", ps_[i].address, " has not answered for ",
                          absl::FormatDuration(now - ps_[i].last_ok), ": ",
                          health[i].status().message());
    }
  }
  if (lost_ps != nullptr) *lost_ps = -1;
  // The ps' highest version bounds the global step; looked at only when
  // none was lost (one that restarted, and served every shard, leaves the
  // others with no version to show until its shards have failed over).
  if (std::all_of(health.begin(), health.end(), [](const auto& h) { return h.ok(); })) {
    int64_t max_version = 0;
    std::vector<proto::HealthResponse> answers;
    for (const auto& h : health) {
      max_version = std::max(max_version, h->max_version());
      answers.push_back(*h);
    }
    coordinator_->SetVersionCeiling(max_version);
    tables_.Update(answers, now);
  }
  if (after_save_pushes_ < 0) {  // the first look: where "between saves" starts
    after_save_pushes_ = probed_pushes_;
    after_save_time_ = now;
  }
  return std::nullopt;
}

absl::Status Job::Recover(const std::string& cause, int64_t step_before) {
  RecoveryRecord record;
  record.cause = cause;
  record.detected = clock_->Now();
  record.step_before = step_before;
  const int64_t generation = coordinator_->BeginRecovery();
  spdlog::warn("{}: recovering (generation {}); workers pause until every ps is restored", cause,
               generation);
  if (options_.checkpoint_dir.empty()) return LostWithoutCheckpoint(cause);
  const std::vector<std::string> saved = common::ListCheckpoints(options_.checkpoint_dir);
  const std::string latest = saved.empty() ? "none" : saved.front();
  const absl::Time deadline = record.detected + timing_.recovery_timeout;
  // Replicated: every shard goes back to its own ps with its backup, and the
  // restore fills every copy alike.
  const bool relayout = replicas_.enabled();
  if (relayout) *layout_.mutable_shards() = initial_.plan().shards();
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (!HoldsACopy(static_cast<int>(i))) continue;
    for (;;) {
      absl::StatusOr<proto::HealthResponse> health =
          ProbePs(*control_, static_cast<int>(i), absl::Seconds(1));
      if (health.ok()) {
        ps_[i].incarnation = health->incarnation();
        ps_[i].last_ok = clock_->Now();
        break;
      }
      if (clock_->Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "ps ", i, " at ", ps_[i].address, " did not come back within --recovery_timeout_s (",
            absl::FormatDuration(timing_.recovery_timeout), "): ", health.status().message(),
            ". The checkpoints in ", options_.checkpoint_dir, " are intact (latest: ", latest,
            "); start the job again to resume from it"));
      }
      if (clock_->WaitFor(timing_.heartbeat_interval, stop_)) {
        return absl::CancelledError(stop_.reason());
      }
    }
  }
  if (relayout) {
    proto::RolesRequest roles;
    roles.set_version(++roles_version_);
    *roles.mutable_shards() = layout_.shards();
    PST_RETURN_IF_ERROR(ForEachPs(ps_.size(), [&](size_t i) -> absl::Status {
      absl::StatusOr<proto::RolesResponse> answer =
          control_->SetRoles(static_cast<int>(i), roles, absl::Seconds(10));
      if (!answer.ok()) {
        return absl::Status(answer.status().code(), absl::StrCat("ps ", i, " at ", ps_[i].address,
                                                                 " did not take its roles back: ",
                                                                 answer.status().message()));
      }
      return absl::OkStatus();
    }));
  }
  std::vector<absl::StatusOr<int>> created(ps_.size(), 0);
  PST_RETURN_IF_ERROR(CreateEverywhere(deadline, &created, /*restoring=*/true));
  PST_ASSIGN_OR_RETURN(std::optional<proto::CheckpointManifest> manifest,
                       RestoreLatest(*control_, ps_, options_, generation, CurrentState()));
  if (!manifest.has_value()) return LostWithoutCheckpoint(cause);
  if (relayout) {
    coordinator_->SetShards(layout_.shards());
    replicas_.SetLayout(layout_.shards());
  }
  ApplyRestored(*manifest);
  after_save_pushes_ = -1;  // the ps counts started again
  probed_pushes_ = 0;
  membership_stale_ = true;  // a restarted ps knows nothing of who left
  SendMembership(coordinator_->Check(clock_->Now()).active);
  coordinator_->SetPhase(proto::PHASE_RUNNING);
  record.resumed = clock_->Now();
  record.restored_step = manifest->global_step();
  record.generation = generation;
  const Coordinator::Redone redone = coordinator_->StepsRedone();
  record.steps_redone = redone.steps;
  record.step_before = std::max(record.step_before, redone.step_before);
  spdlog::info(
      "recovered in {:.2f} s: every ps restored to step {}, the workers to data positions [{}]; "
      "they train again the batches past those (at least {} by their last heartbeats); "
      "training resumes",
      absl::ToDoubleSeconds(record.resumed - record.detected), record.restored_step,
      absl::StrJoin(manifest->worker_positions(), ", "), record.steps_redone_total());
  recoveries_.push_back(record);
  if (metrics_ != nullptr) metrics_->Recovered();
  return absl::OkStatus();
}

// How often the chief looks whether every worker holds at an epoch's end.
constexpr absl::Duration kHeldEpochPoll = absl::Milliseconds(2);

void Job::AwaitTick() {
  if (!holds_at_epoch_ends_) {
    clock_->WaitFor(timing_.heartbeat_interval, stop_);
    return;
  }
  const absl::Time until = clock_->Now() + timing_.heartbeat_interval;
  for (absl::Time now = clock_->Now(); now < until; now = clock_->Now()) {
    if (clock_->WaitFor(std::min(until - now, kHeldEpochPoll), stop_)) return;
    if (coordinator_->HeldEpochEnd() > 0) return;
  }
}

void Job::NoteStepsRedone() {
  if (recoveries_.empty() || recoveries_.back().redone_reported) return;
  RecoveryRecord& record = recoveries_.back();
  const Coordinator::Redone redone = coordinator_->StepsRedone();
  if (redone.generation != record.generation) return;  // a newer restore is under way
  for (size_t w = 0; w < redone.steps.size() && w < record.steps_redone.size(); ++w) {
    record.steps_redone[w] = std::max(record.steps_redone[w], redone.steps[w]);
  }
  record.step_before = std::max(record.step_before, redone.step_before);
  // In async and ssp each push is one update: the ps had every redone batch
  // applied (a worker's answer may show a version a concurrent push has not
  // reached on every ps yet).
  if (initial_.training().sync().mode() != proto::SYNC) {
    record.step_before =
        std::max(record.step_before, record.restored_step + record.steps_redone_total());
  }
  if (metrics_ != nullptr) {
    for (size_t w = 0; w < record.steps_redone.size(); ++w) {
      int64_t all = 0;
      for (const RecoveryRecord& r : recoveries_) {
        if (w < r.steps_redone.size()) all += r.steps_redone[w];
      }
      metrics_->StepsRedone(static_cast<int>(w), all);
    }
  }
  if (!std::all_of(redone.known.begin(), redone.known.end(), [](bool k) { return k; })) return;
  record.redone_reported = true;
  std::vector<std::string> each;
  for (size_t w = 0; w < record.steps_redone.size(); ++w) {
    each.push_back(absl::StrCat("worker ", w, ": ", record.steps_redone[w]));
  }
  spdlog::info(
      "after the restore to step {}: the workers train {} batch(es) again ({}); the job had "
      "reached step {}, so {} global step(s) were lost",
      record.restored_step, record.steps_redone_total(), absl::StrJoin(each, ", "),
      record.step_before, std::max<int64_t>(0, record.step_before - record.restored_step));
}

void Job::SendMembership(const std::vector<int>& active) {
  active_ = active;
  membership_stale_ = false;
  proto::MembershipRequest membership;
  for (int w : active) membership.add_active_workers(w);
  membership.set_replicas_to_aggregate(quorum_);
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (!HoldsACopy(static_cast<int>(i))) continue;
    absl::StatusOr<proto::MembershipResponse> s =
        control_->SetMembership(static_cast<int>(i), membership, absl::Seconds(5));
    if (!s.ok()) {
      membership_stale_ = true;  // try again next time
      spdlog::warn("could not update membership on {}: {}", ps_[i].address, s.status().message());
    }
  }
  if (initial_.training().sync().mode() != proto::ASYNC) {
    spdlog::info("{} worker(s) still training; sync quorum now {}", active.size(),
                 std::max<size_t>(1, std::min<size_t>(quorum_, active.size())));
  }
}

}  // namespace pst::chief
