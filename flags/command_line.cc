#include "flags/command_line.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_split.h"
#include "common/edit_distance.h"

namespace pst::flags {
namespace {

// Abseil's usage flags: recognized by its parser, but not registered as
// flags in this version of Abseil.
constexpr std::string_view kUsageFlags[] = {"help",        "helpfull", "helpshort",
                                            "helppackage", "version",  "only_check_args",
                                            "helpon",      "helpmatch"};

bool IsUsageFlag(std::string_view name) {
  return std::find(std::begin(kUsageFlags), std::end(kUsageFlags), name) != std::end(kUsageFlags);
}

absl::CommandLineFlag* Find(std::string_view name) {
  return absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
}

}  // namespace

ScannedCommandLine ScanCommandLine(const std::vector<std::string>& args) {
  ScannedCommandLine scanned;
  std::set<std::string, std::less<>> undefok;
  for (const std::string& arg : args) {
    for (const char* prefix : {"--undefok=", "-undefok="}) {
      if (arg.rfind(prefix, 0) != 0) continue;
      for (absl::string_view name :
           absl::StrSplit(arg.substr(std::string(prefix).size()), ',', absl::SkipEmpty())) {
        undefok.emplace(name);
      }
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      scanned.positional.insert(scanned.positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      scanned.positional.push_back(arg);
      continue;
    }
    std::string_view name(arg);
    name.remove_prefix(name.rfind("--", 0) == 0 ? 2 : 1);
    const size_t equals = name.find('=');
    const bool has_value = equals != std::string_view::npos;
    if (has_value) name = name.substr(0, equals);
    if (IsUsageFlag(name)) {
      scanned.help = scanned.help || name == "help" || name == "helpshort";
      continue;
    }
    if (absl::CommandLineFlag* flag = Find(name); flag != nullptr) {
      // "--name value": the next argument is the value.
      if (!has_value && !flag->IsOfType<bool>()) ++i;
      continue;
    }
    if (name.rfind("no", 0) == 0) {
      absl::CommandLineFlag* flag = Find(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) continue;
    }
    if (undefok.count(name) > 0 ||
        (name.rfind("no", 0) == 0 && undefok.count(name.substr(2)) > 0)) {
      continue;
    }
    scanned.unknown.emplace_back(name);
  }
  return scanned;
}

std::string UnknownFlagMessage(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) names.emplace_back(flag_name);
  // A stable order, so that of equally close names the same one is named.
  std::sort(names.begin(), names.end());
  std::vector<std::string_view> candidates(names.begin(), names.end());
  candidates.insert(candidates.end(), std::begin(kUsageFlags), std::end(kUsageFlags));
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  const std::string_view best = common::ClosestName(lower, candidates);
  std::string message = "unknown flag --" + std::string(name);
  if (!best.empty()) message += " (did you mean --" + std::string(best) + "?)";
  return message;
}

std::vector<char*> ParseCommandLineOrExit(int argc, char** argv, const HelpPrinter& help) {
  const ScannedCommandLine scanned =
      ScanCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!scanned.unknown.empty()) {
    for (const std::string& name : scanned.unknown) {
      std::fprintf(stderr, "ERROR: %s\n", UnknownFlagMessage(name).c_str());
    }
    std::exit(2);
  }
  if (scanned.help && help != nullptr) {
    std::vector<std::string> positional = {argc > 0 ? argv[0] : ""};
    positional.insert(positional.end(), scanned.positional.begin(), scanned.positional.end());
    if (help(positional)) std::exit(0);
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace pst::flags
