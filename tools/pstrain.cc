// pstrain: the user-facing launcher.
//
//   pstrain local --ps 2 --workers 2 [--epochs N] [model flags]
//       runs a whole cluster on this machine, one process per task.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/job_flags.h"
#include "common/process.h"
#include "tools/local_cluster.h"
#include "tools/subprocess.h"

ABSL_FLAG(int32_t, ps, 2, "local: number of ps tasks.");
ABSL_FLAG(int32_t, workers, 2, "local: number of worker tasks.");
ABSL_FLAG(bool, chief, true, "local: run a separate chief (false: worker 0 acts as chief).");
ABSL_FLAG(std::string, host, "127.0.0.1", "local: address every task listens on.");
ABSL_FLAG(double, timeout_s, 0, "local: stop the whole job after this many seconds (0: never).");
ABSL_FLAG(double, grace_s, 10, "local: seconds between SIGTERM and SIGKILL when stopping.");

namespace {

// Job flags the launcher forwards, with their current values, to every daemon.
constexpr const char* kForwardedFlags[] = {
    "data_dir",     "model",         "hidden",       "epochs",         "max_steps",
    "batch_size",   "learning_rate", "optimizer",    "momentum",       "nesterov",
    "seed",         "log_every_s",   "heartbeat_ms", "peer_timeout_s", "startup_timeout_s",
    "rpc_timeout_s"};

constexpr char kUsage[] =
    "pstrain: parameter-server training.\n"
    "\n"
    "  pstrain local [--ps=2] [--workers=2] [--chief=true] [--epochs=3] [--batch_size=64]\n"
    "                [--optimizer=adam] [--learning_rate=0.001] [--hidden=256,128]\n"
    "                [--max_steps=0] [--data_dir=DIR] [--summary_json=PATH] [--timeout_s=0]\n"
    "      Runs a whole cluster on this machine and trains the model.\n"
    "\n"
    "Run 'pstrain --helpfull' for every flag.";

int Local() {
  pst::common::StopSignal stop;
  pst::common::HandleTerminationSignals(
      [&stop](int signo) { stop.Stop(absl::StrCat("interrupted by signal ", signo)); });
  pst::tools::LocalClusterOptions options;
  options.num_ps = absl::GetFlag(FLAGS_ps);
  options.num_workers = absl::GetFlag(FLAGS_workers);
  options.with_chief = absl::GetFlag(FLAGS_chief);
  options.host = absl::GetFlag(FLAGS_host);
  options.bin_dir = pst::tools::ExecutableDir();
  options.summary_json = absl::GetFlag(FLAGS_summary_json);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.grace = absl::Seconds(absl::GetFlag(FLAGS_grace_s));
  for (const char* name : kForwardedFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr)
      options.daemon_flags.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
  }
  // Check the job flags here, so a typo fails before any process starts.
  if (absl::StatusOr<pst::proto::TrainingConfig> training = pst::common::TrainingConfigFromFlags();
      !training.ok()) {
    std::fprintf(stderr, "pstrain local: %s\n", std::string(training.status().message()).c_str());
    return 2;
  }
  if (absl::StatusOr<pst::common::Timing> timing = pst::common::TimingFromFlags(); !timing.ok()) {
    std::fprintf(stderr, "pstrain local: %s\n", std::string(timing.status().message()).c_str());
    return 2;
  }
  return pst::tools::RunLocalCluster(options, &stop);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string command = args[1];
  if (command == "local" && args.size() == 2) return Local();
  if (command == "local") {
    std::fprintf(stderr, "pstrain local: unexpected argument '%s'\n", args[2]);
    return 2;
  }
  if (command == "help") {
    std::printf("%s\n", kUsage);
    return 0;
  }
  std::fprintf(stderr, "pstrain: unknown command '%s'\n\n%s\n", command.c_str(), kUsage);
  return 2;
}
