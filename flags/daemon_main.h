// What the chief and worker main()s share: load the TF_CONFIG for this
// binary, set up logging and signals, and read the job flags.
#ifndef PST_FLAGS_DAEMON_MAIN_H_
#define PST_FLAGS_DAEMON_MAIN_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/process.h"
#include "common/tf_config.h"
#include "flags/job_flags.h"
#include "proto/pstrain.pb.h"

namespace pst::flags {

struct DaemonSetup {
  common::TfConfig tf;
  proto::TrainingConfig training;
  common::Timing timing;
  // The Prometheus exporter of --metrics_port (null when off); the main
  // hands it to the library it runs (ChiefOptions, TrainerOptions).
  std::shared_ptr<common::MetricsExporter> metrics;
  // Security, server limits and the BDP probe of the flags
  // (RpcSettingsFromFlags), for every channel and server the task makes.
  rpc::RpcSettings rpc;
};

// Parses TF_CONFIG (expecting `type`), the training flags and the timing
// flags; runs CheckBeforeStart (flags/start_checks.h) for this task; runs
// `adjust` on the result when given (a worker that claims its
// index from the chief sets it there); starts logging and metrics as the
// task's name; routes SIGINT/SIGTERM to ProcessStopSignal(). On error prints
// "<binary>: <message>" to stderr and returns it; the caller exits 2.
using AdjustSetup = std::function<absl::Status(DaemonSetup*)>;
absl::StatusOr<DaemonSetup> SetUpDaemon(const char* binary, common::TaskType type,
                                        const AdjustSetup& adjust = nullptr);

}  // namespace pst::flags

#endif  // PST_FLAGS_DAEMON_MAIN_H_
