// Command-line parsing for every pstrain binary: Abseil's, but a misspelt
// flag is refused with the closest real one named,
//   ERROR: unknown flag --epoch (did you mean --epochs?)
// (Abseil's own ParseCommandLine says only "Unknown command line flag", and
// this Abseil has no hook for more.) Every main() calls
// ParseCommandLineOrExit instead of absl::ParseCommandLine.
#ifndef PST_FLAGS_COMMAND_LINE_H_
#define PST_FLAGS_COMMAND_LINE_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pst::flags {

// The command line sorted without parsing any value: what Abseil would
// take as flags, and what it would leave as positional arguments.
struct ScannedCommandLine {
  std::vector<std::string> unknown;     // flags no Abseil flag names, without dashes or value
  std::vector<std::string> positional;  // in order; everything after "--" too
  bool help = false;                    // --help or --helpshort (not --helpfull)
};

// Sorts `args` (argv without argv[0]) as Abseil would: -name and --name,
// with =value, or with the value in the next argument for a flag that is
// not a bool; --noname for a bool; Abseil's usage flags (--help,
// --helpfull, --version, ...); names listed by --undefok are not unknown.
// Reads the flags registered in this process.
ScannedCommandLine ScanCommandLine(const std::vector<std::string>& args);

// "unknown flag --epoch (did you mean --epochs?)": the closest flag (or
// usage flag) of this binary within two edits, or none.
std::string UnknownFlagMessage(std::string_view name);

// Prints the help for a command line with --help. Gets the positional
// arguments (argv[0] first); returns false to leave it to Abseil.
using HelpPrinter = std::function<bool(const std::vector<std::string>& positional)>;

// absl::ParseCommandLine(argc, argv), after refusing unknown flags: each
// gets its "ERROR: unknown flag ..." line on stderr and the process exits
// with status 2. With `help`, --help and --helpshort call it first, and the
// process exits 0 if it printed the help. Returns the positional
// arguments, argv[0] first, as absl::ParseCommandLine does.
std::vector<char*> ParseCommandLineOrExit(int argc, char** argv, const HelpPrinter& help = nullptr);

}  // namespace pst::flags

#endif  // PST_FLAGS_COMMAND_LINE_H_
