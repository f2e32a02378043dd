// chief: plans the placement, initializes the variables, drives the job to
// completion, evaluates the model, and tells every daemon to exit.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "chief/chief.h"
#include "common/logging.h"
#include "common/process.h"
#include "flags/chief_options_from_flags.h"
#include "flags/command_line.h"
#include "flags/daemon_main.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain chief. Usage: TF_CONFIG='{...\"task\":{\"type\":\"chief\",\"index\":0}}' chief "
      "[--epochs=N] [--summary_json=PATH] ...");
  pst::flags::ParseCommandLineOrExit(argc, argv);
  try {
    pst::common::StopSignal& stop = pst::common::ProcessStopSignal();
    absl::StatusOr<pst::flags::DaemonSetup> setup =
        pst::flags::SetUpDaemon("chief", pst::common::TaskType::kChief);
    if (!setup.ok()) return 2;
    absl::Status status = pst::chief::RunChief(pst::flags::ChiefOptionsFromFlags(*setup), stop);
    if (!status.ok()) {
      spdlog::error("job failed: {}", status.ToString());
      return 1;
    }
    spdlog::info("job done");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chief: fatal: %s\n", e.what());
    return 1;
  }
}
