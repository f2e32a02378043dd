// evaluator: TF_CONFIG's evaluator task for the built-in models. It
// evaluates each checkpoint the job saves on the held-out data, writes the
// metrics to TensorBoard (<summary_dir>/eval), keeps the best checkpoint in
// <checkpoint_dir>/best, reports to the chief, and exits 0 after the job's
// final checkpoint. Python models are evaluated with pstrain.Evaluator.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "common/process.h"
#include "evaluator/builtin_eval.h"
#include "evaluator/chief_link.h"
#include "evaluator/evaluator_session.h"
#include "flags/command_line.h"
#include "flags/daemon_main.h"

namespace {

int Run(const pst::flags::DaemonSetup& setup) {
  using pst::evaluator::EvaluatorSession;
  pst::evaluator::EvaluatorOptions options;
  options.index = setup.tf.task.index;
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.summary_dir = absl::GetFlag(FLAGS_summary_dir);
  options.best_metric = absl::GetFlag(FLAGS_best_metric);
  absl::StatusOr<pst::evaluator::BestMode> mode =
      pst::evaluator::ParseBestMode(absl::GetFlag(FLAGS_best_mode));
  if (!mode.ok()) {
    std::fprintf(stderr, "evaluator: %s\n", std::string(mode.status().message()).c_str());
    return 2;
  }
  options.best_mode = *mode;
  options.poll_interval = setup.timing.heartbeat_interval;
  options.chief_timeout = setup.timing.recovery_timeout;
  absl::StatusOr<std::unique_ptr<EvaluatorSession>> session = EvaluatorSession::Create(
      options, pst::evaluator::MakeGrpcChiefLink(setup.tf.cluster.CoordinatorAddress(), setup.rpc));
  if (!session.ok()) {
    std::fprintf(stderr, "evaluator: %s\n", std::string(session.status().message()).c_str());
    return 2;
  }
  pst::evaluator::BuiltinEvaluation evaluation(absl::GetFlag(FLAGS_data_dir));
  pst::common::StopSignal& stop = pst::common::ProcessStopSignal();
  for (;;) {
    absl::StatusOr<std::optional<pst::evaluator::FoundCheckpoint>> next = (*session)->Next(stop);
    if (!next.ok()) {
      if (absl::IsCancelled(next.status())) return 0;  // SIGTERM
      spdlog::error("evaluator failed: {}", next.status().ToString());
      return 1;
    }
    if (!next->has_value()) return 0;
    // A model this binary cannot compute ends it; any other failure (a
    // restore's) is this checkpoint's alone.
    if (absl::Status model =
            pst::evaluator::BuiltinEvaluation::ModelToEvaluate((*next)->manifest.training())
                .status();
        !model.ok()) {
      (*session)->GiveUp(model);
      spdlog::error("evaluator failed: {}", model.message());
      return 1;
    }
    absl::StatusOr<std::map<std::string, double>> metrics = evaluation.Evaluate(**next);
    if (!metrics.ok()) {
      (*session)->ReportFailure(**next, metrics.status());
      continue;
    }
    if (absl::Status reported = (*session)->Report(**next, *metrics).status(); !reported.ok()) {
      spdlog::error("evaluator failed: {}", reported.ToString());
      return 1;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain evaluator. Usage: TF_CONFIG='{...\"task\":{\"type\":\"evaluator\",\"index\":0}}' "
      "evaluator --checkpoint_dir=DIR [--data_dir=DIR] [--summary_dir=DIR] [--best_metric=NAME]");
  pst::flags::ParseCommandLineOrExit(argc, argv);
  try {
    absl::StatusOr<pst::flags::DaemonSetup> setup =
        pst::flags::SetUpDaemon("evaluator", pst::common::TaskType::kEvaluator);
    if (!setup.ok()) return 2;
    return Run(*setup);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "evaluator: fatal: %s\n", e.what());
    return 1;
  }
}
