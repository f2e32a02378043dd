// pstrain's subcommands, each reading its flags (defined in
// pstrain_commands.cc, the job flags in flags/) and returning the process's
// exit status: 0 done, 1 failed (a check or a job), 2 bad input.
#ifndef PST_CMD_PSTRAIN_COMMANDS_H_
#define PST_CMD_PSTRAIN_COMMANDS_H_

#include <string>

#include "rpc/grpc_channel.h"

namespace pst::cli {

int Local();
int Plan();
int Reference();
int GenerateCriteo();
int GenerateLibsvm();
int Devices();
int TfConfigCommand();
int CheckCommand(const rpc::RpcSettings& rpc);
int HealthCommand(const std::string& address, const rpc::RpcSettings& rpc);
// DIR is one checkpoint or a checkpoint root (then every checkpoint in it,
// and any directory that looks like an unfinished one, is reported).
int InspectCheckpoints(const std::string& dir);
// Exports checkpoint DIR (or the newest valid one in a root) to OUT.
int ExportCheckpoint(const std::string& dir, const std::string& out);

// Whether a security flag holds "{task}": pstrain local gives each daemon
// its own certificate or token.
bool NamesEachTasksFiles();

}  // namespace pst::cli

#endif  // PST_CMD_PSTRAIN_COMMANDS_H_
