// The job's evaluations (Job's part in job.h): epochs that call for a
// checkpoint or an evaluation, the chief's own evaluations during
// training, and the wait for the evaluators at the end.
#include "absl/strings/str_cat.h"
#include "chief/job.h"
#include "common/logging.h"
#include "models/registry.h"

namespace pst::chief {

absl::Status CheckEvaluationOptions(const ChiefOptions& options) {
  const bool has_evaluator = !options.tf.cluster.evaluator.empty();
  if (options.checkpoint_dir.empty()) {
    if (has_evaluator) {
      return absl::InvalidArgumentError(
          "TF_CONFIG lists an evaluator task, which evaluates the job's checkpoints: give the "
          "chief --checkpoint_dir (the directory the ps and the evaluator share)");
    }
    if (options.checkpoint_every_epochs > 0) {
      return absl::InvalidArgumentError("--checkpoint_every_epochs needs --checkpoint_dir");
    }
  }
  if (options.checkpoint_every_epochs < 0 || options.eval_every_epochs < 0) {
    return absl::InvalidArgumentError(
        "--checkpoint_every_epochs and --eval_every_epochs must be at least 0");
  }
  if (options.eval_every_epochs > 0 && !has_evaluator) {
    absl::StatusOr<const models::Model*> model = models::ModelFor(options.training);
    if (model.ok() && (*model)->computed_by_workers()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--eval_every_epochs: the chief cannot compute model '", options.training.model(),
          "'; add an evaluator task to TF_CONFIG (pstrain local --evaluator_command=...) that "
          "runs your evaluation with pstrain.Evaluator"));
    }
  }
  return absl::OkStatus();
}

Job::EpochsDue Job::CheckEpochs(const Coordinator::Snapshot& snap) {
  EpochsDue due;
  if (snap.all_done) return due;
  // Where the workers hold at the epochs' ends, an epoch counts once every
  // worker holds at its end (and is released whether or not it is due).
  due.held = holds_at_epoch_ends_ ? snap.epoch_end_held : 0;
  const int completed = holds_at_epoch_ends_ ? snap.epoch_end_held : snap.epochs_completed;
  if (completed <= epochs_seen_) return due;
  auto crossed = [&](int every) { return every > 0 && completed / every > epochs_seen_ / every; };
  const bool has_evaluator = !options_.tf.cluster.evaluator.empty();
  due.save = crossed(options_.checkpoint_every_epochs) ||
             (has_evaluator && crossed(options_.eval_every_epochs));
  due.evaluate = !has_evaluator && crossed(options_.eval_every_epochs);
  epochs_seen_ = completed;
  if (due.save || due.evaluate) {
    spdlog::info("every worker has completed {} epoch(s): {}", completed,
                 due.save && due.evaluate ? "checkpoint and evaluation"
                 : due.save               ? "checkpoint"
                                          : "evaluation");
  }
  return due;
}

void Job::EvaluateDuringTraining(int epochs_completed) {
  absl::StatusOr<EvalResult> eval = evaluate_(coordinator_->State());
  if (!eval.ok()) {
    spdlog::warn("evaluation after epoch {} failed: {}", epochs_completed,
                 eval.status().message());
    return;
  }
  spdlog::info("evaluation after epoch {} (step {}): {}", epochs_completed, eval->global_step,
               eval->line);
  events_.WriteEval(eval->metrics, eval->global_step);
  if (evaluations_ != nullptr) {
    evaluations_->AddChiefEvaluation(eval->global_step, epochs_completed, eval->metrics,
                                     clock_->Now());
  }
}

void Job::AwaitEvaluators(int64_t step) {
  coordinator_->SetFinalCheckpointStep(step);
  if (evaluations_ == nullptr || evaluations_->num_evaluators() == 0) return;
  spdlog::info("waiting for the evaluator(s) to report the final checkpoint (step {})", step);
  const absl::Status reported = evaluations_->AwaitStep(step, options_.evaluator_wait);
  if (reported.ok()) {
    spdlog::info("the evaluator(s) reported the final checkpoint");
  } else {
    spdlog::warn("ending without the final evaluation: {}", reported.message());
  }
}

}  // namespace pst::chief
