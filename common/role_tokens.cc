#include "common/role_tokens.h"

#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pst::common {
namespace {

constexpr size_t kDigestHexDigits = 2 * SHA256_DIGEST_LENGTH;

bool IsHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string Sha256(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

absl::StatusOr<RoleTokens> RoleTokens::Parse(absl::string_view text) {
  RoleTokens table;
  absl::flat_hash_map<std::string, int> line_of_task;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const size_t comment = line.find('#');
    if (comment != absl::string_view::npos) line = line.substr(0, comment);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", why));
    };
    if (fields[0].size() != kDigestHexDigits || !IsHex(fields[0])) {
      return bad(absl::StrCat("'", fields[0].substr(0, 80),
                              "' is not a SHA-256 digest (64 hex digits) of a token"));
    }
    if (fields.size() < 2) {
      return bad("a token needs the task it speaks for, e.g. worker-0.pstrain");
    }
    std::vector<TaskIdentity> tasks;
    for (size_t i = 1; i < fields.size(); ++i) {
      std::optional<TaskIdentity> task = ParseTaskName(fields[i]);
      if (!task.has_value()) {
        return bad(absl::StrCat("'", fields[i].substr(0, 80),
                                "' is not a task name (chief-0.pstrain, ps-1.pstrain, "
                                "worker-3.pstrain, ...)"));
      }
      const std::string name = TaskName(*task);
      auto [it, inserted] = line_of_task.emplace(name, line_number);
      if (!inserted) {
        return bad(absl::StrCat(name, " has a token on line ", it->second,
                                " already: a task has one token"));
      }
      tasks.push_back(*task);
    }
    std::string digest = absl::HexStringToBytes(absl::AsciiStrToLower(fields[0]));
    if (!table.tasks_.emplace(std::move(digest), std::move(tasks)).second) {
      return bad("this digest is listed twice: give each task its own token");
    }
  }
  if (table.tasks_.empty()) {
    return absl::InvalidArgumentError("the table lists no token");
  }
  return table;
}

const std::vector<TaskIdentity>& RoleTokens::TasksOf(absl::string_view token) const {
  static const std::vector<TaskIdentity>* const none = new std::vector<TaskIdentity>();
  auto it = tasks_.find(Sha256(token));
  return it == tasks_.end() ? *none : it->second;
}

}  // namespace pst::common
