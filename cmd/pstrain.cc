// pstrain: the user-facing launcher.
//
//   pstrain local | plan | reference | ... (pstrain_help.cc lists them)
//
// This file dispatches a command line to its subcommand
// (pstrain_commands.h); pstrain_help.h holds the usage text.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "cmd/pstrain_commands.h"
#include "cmd/pstrain_help.h"
#include "flags/command_line.h"
#include "flags/job_flags.h"
#include "rpc/grpc_channel.h"

using pst::cli::PrintSubcommandHelp;

int main(int argc, char** argv) {
  const std::string usage = pst::cli::Usage();
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> args = pst::flags::ParseCommandLineOrExit(argc, argv, PrintSubcommandHelp);
  if (args.size() < 2) {
    std::fprintf(stderr, "%s\n", usage.c_str());
    return 2;
  }
  const std::string command = args[1];
  // health and check reach daemons; local forwards these flags to them, and
  // checks them here first unless they name each daemon's own files
  // ("{task}"), which only the daemons can load.
  absl::StatusOr<pst::rpc::RpcSettings> rpc = pst::rpc::RpcSettings();
  if (command != "local" || !pst::cli::NamesEachTasksFiles()) {
    rpc = pst::flags::RpcSettingsFromFlags();
  }
  if (!rpc.ok()) {
    std::fprintf(stderr, "pstrain %s: %s\n", command.c_str(),
                 std::string(rpc.status().message()).c_str());
    return 2;
  }
  if (command == "checkpoint") {
    const std::string sub = args.size() > 2 ? args[2] : "";
    if (sub == "inspect" && args.size() == 4) return pst::cli::InspectCheckpoints(args[3]);
    if (sub == "export" && args.size() == 5) return pst::cli::ExportCheckpoint(args[3], args[4]);
    std::fprintf(stderr,
                 "usage: pstrain checkpoint inspect DIR\n"
                 "       pstrain checkpoint export [--format=safetensors] [--include_slots] DIR "
                 "OUT\n");
    return 2;
  }
  if (command == "health") {
    if (args.size() != 3) {
      std::fprintf(stderr, "usage: pstrain health HOST:PORT [--timeout_s=5]\n");
      return 2;
    }
    return pst::cli::HealthCommand(args[2], *rpc);
  }
  // `pstrain help SUBCOMMAND` is `pstrain SUBCOMMAND --help`.
  if (command == "help") {
    if (args.size() == 3 && PrintSubcommandHelp({args[0], args[2]})) return 0;
    std::printf("%s\n", usage.c_str());
    return args.size() <= 2 ? 0 : 2;
  }
  if (args.size() > 2) {
    std::fprintf(stderr, "pstrain %s: unexpected argument '%s'\n", command.c_str(), args[2]);
    return 2;
  }
  try {
    if (command == "local") return pst::cli::Local();
    if (command == "plan") return pst::cli::Plan();
    if (command == "reference") return pst::cli::Reference();
    if (command == "generate_criteo") return pst::cli::GenerateCriteo();
    if (command == "generate_libsvm") return pst::cli::GenerateLibsvm();
    if (command == "devices") return pst::cli::Devices();
    if (command == "tfconfig") return pst::cli::TfConfigCommand();
    if (command == "check") return pst::cli::CheckCommand(*rpc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstrain %s: fatal: %s\n", command.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "pstrain: unknown command '%s'\n\n%s\n", command.c_str(), usage.c_str());
  return 2;
}

