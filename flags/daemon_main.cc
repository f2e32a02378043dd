#include "flags/daemon_main.h"

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "flags/job_flags.h"
#include "flags/start_checks.h"

namespace pst::flags {

absl::StatusOr<DaemonSetup> SetUpDaemon(const char* binary, common::TaskType type,
                                        const AdjustSetup& adjust) {
  common::TuneForServing();
  DaemonSetup setup;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<common::TfConfig> tf =
        common::LoadTfConfig(absl::GetFlag(FLAGS_tf_config), type);
    if (!tf.ok()) return tf.status();
    setup.tf = *std::move(tf);
    if (const int workers = absl::GetFlag(FLAGS_num_workers); workers > 0) {
      absl::StatusOr<common::TfConfig> scaled = common::WithWorkerCount(setup.tf, workers);
      if (!scaled.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--num_workers=", workers, ": ", scaled.status().message()));
      }
      setup.tf = *std::move(scaled);
    }
    absl::StatusOr<proto::TrainingConfig> training = TrainingConfigFromFlags();
    if (!training.ok()) return training.status();
    setup.training = *std::move(training);
    absl::StatusOr<common::Timing> timing = TimingFromFlags();
    if (!timing.ok()) return timing.status();
    setup.timing = *timing;
    // Everything that can be refused on the flags alone, before anything
    // starts (a worker that claims its index has not asked the chief yet).
    StartCheck check;
    check.tf = setup.tf;
    check.training = setup.training;
    check.timing = setup.timing;
    if (absl::Status s = CheckBeforeStart(check); !s.ok()) return s;
    absl::StatusOr<rpc::RpcSettings> rpc = RpcSettingsFromFlags();
    if (!rpc.ok()) return rpc.status();
    setup.rpc = *std::move(rpc);
    return adjust == nullptr ? absl::OkStatus() : adjust(&setup);
  }();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", binary, std::string(status.message()).c_str());
    return status;
  }
  common::InitLogging(common::TaskIdString(setup.tf.task));
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> metrics =
      StartMetricsFromFlags(common::TaskIdString(setup.tf.task));
  if (!metrics.ok()) {
    std::fprintf(stderr, "%s: %s\n", binary, std::string(metrics.status().message()).c_str());
    return metrics.status();
  }
  setup.metrics = *std::move(metrics);
  if (setup.metrics != nullptr) {
    spdlog::info("Prometheus metrics on {} at /metrics", setup.metrics->address());
  }
  common::StopOnTerminationSignals("received signal");
  return setup;
}

}  // namespace pst::flags
