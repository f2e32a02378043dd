// The job's progress display (--progress): the total steps it expects, and
// the line it shows every heartbeat.
#include <unistd.h>

#include <algorithm>

#include "absl/strings/strip.h"
#include "chief/job.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "models/registry.h"

namespace pst::chief {

Job::ProgressDisplay Job::StartProgress() {
  ProgressDisplay progress;
  const common::ProgressMode mode = common::ResolveProgressMode(options_.progress, STDERR_FILENO);
  if (mode == common::ProgressMode::kOff) return progress;
  // Only some data tells its size cheaply (the IDX header); a model whose
  // data would have to be read whole says 0, and then the total is known
  // only from --max_steps.
  absl::StatusOr<const models::Model*> model = models::ModelFor(options_.training);
  const int64_t examples =
      model.ok() ? (*model)->CountTrainingExamples(options_.training, options_.data_dir) : 0;
  progress.total_steps = ExpectedFinalStep(
      initial_.training(), static_cast<int>(options_.tf.cluster.worker.size()), examples);
  if (mode == common::ProgressMode::kTty) {
    progress.line =
        common::ProgressLine::ForFd(STDERR_FILENO, /*terminal=*/true, timing_.log_every);
    progress.logs = std::make_unique<common::LogAboveProgressLine>(progress.line.get());
  } else {
    common::ProgressLine::Options plain;
    plain.plain_interval = timing_.log_every;
    // The log line, with its time and task, is what tests and log readers
    // (and pstrain local) look for.
    plain.emit_plain = [](const std::string& text) { spdlog::info("{}", text); };
    plain.write = [](absl::string_view text) { spdlog::info("{}", absl::StripSuffix(text, "\n")); };
    progress.line = std::make_unique<common::ProgressLine>(std::move(plain));
  }
  return progress;
}

void Job::ShowProgress(const Coordinator::Snapshot& snap, absl::Time now, ProgressDisplay* progress,
                       bool final) {
  if (progress->line == nullptr) return;
  const double secs = absl::ToDoubleSeconds(now - running_since_);
  common::Progress p;
  p.step = snap.global_step;
  p.total_steps = progress->total_steps;
  p.total_epochs = options_.training.epochs();
  // The epoch under way; once every worker is done (a resumed job's workers
  // may have had nothing left to train), every epoch they completed.
  p.epoch = std::min(p.total_epochs, std::max(snap.epoch + 1, snap.epochs_completed));
  p.loss = snap.loss;
  p.examples_per_sec = secs > 0 ? snap.examples / secs : 0.0;
  const proto::OptimizerConfig& optimizer = options_.training.optimizer();
  if (common::IsScheduled(optimizer.schedule())) {
    p.learning_rate = common::ScheduledRate(optimizer, snap.global_step);
  }
  p.eta = progress->eta.Update(snap.global_step, progress->total_steps, now);
  p.workers_done = snap.done;
  p.workers = static_cast<int>(options_.tf.cluster.worker.size());
  p.tables = tables_.ProgressText();
  p.replicas = replicas_.ProgressText();
  if (final) {
    progress->line->Finish(common::FormatProgress(p));
  } else {
    progress->line->Update(common::FormatProgress(p));
  }
}

}  // namespace pst::chief
