#include "data/generated.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pst::data {

absl::StatusOr<std::optional<std::map<std::string, int64_t>>> ParseGenerateSpec(
    const std::string& data, const std::vector<std::string>& known) {
  if (data != "generate" && !absl::StartsWith(data, "generate:")) return std::nullopt;
  std::map<std::string, int64_t> settings;
  if (data.size() > 9) {
    for (absl::string_view item : absl::StrSplit(data.substr(9), ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
      int64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value) || value < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--data=", data, ": '", item, "' needs a positive integer value"));
      }
      if (std::find(known.begin(), known.end(), kv.first) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat("--data=", data, ": unknown key '", kv.first,
                                                       "' (known: ", absl::StrJoin(known, ", "),
                                                       ")"));
      }
      settings[kv.first] = value;
    }
  }
  return settings;
}

absl::StatusOr<std::string> GenerateOnce(
    const std::string& file_name,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& write) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string path =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", file_name);
  if (std::filesystem::exists(path)) return path;
  const std::string partial = absl::StrCat(path, ".", getpid(), ".tmp");
  absl::StatusOr<std::string> written = write(partial);
  if (!written.ok()) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    return written.status();
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", partial, ": ", ec.message()));
  std::printf("pstrain: generated %s: %s\n", path.c_str(), written->c_str());
  return path;
}

}  // namespace pst::data
