// pstrain's usage text: every subcommand's usage lines, and `pstrain
// SUBCOMMAND --help`, its usage and the flags it reads with their defaults
// and help.
#ifndef PST_CMD_PSTRAIN_HELP_H_
#define PST_CMD_PSTRAIN_HELP_H_

#include <string>
#include <vector>

namespace pst::cli {

// The general usage: every subcommand's lines.
std::string Usage();

// `pstrain SUBCOMMAND --help` (positional[1] the subcommand): prints its
// usage and flags. False for no subcommand or an unknown one (Abseil's
// --help, with the general usage, then).
bool PrintSubcommandHelp(const std::vector<std::string>& positional);

}  // namespace pst::cli

#endif  // PST_CMD_PSTRAIN_HELP_H_
