// Per-role tokens: a role for every caller when the cluster shares one
// certificate (or uses TLS without client certificates), free of gRPC.
//
// Each task gets a token of its own (a random secret, sent as
// "authorization: Bearer <token>" by --auth_token_file). The servers (ps,
// chief) get a table, --role_tokens_file, of the tokens' SHA-256 digests and
// the task each speaks for:
//
//   # sha256 of the token (hex)                                      task(s)
//   9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 chief-0.pstrain
//   60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752 worker-0.pstrain
//
// One line a token: 64 hex digits, then one or more task names
// (task_identity.h) separated by blanks; '#' starts a comment; blank lines
// are skipped. A token may speak for several tasks (worker 0 of a
// chief-less cluster is chief 0 too). The servers hold only digests, so a ps
// that is read by an attacker gives away no token it could act with.
#ifndef PST_COMMON_ROLE_TOKENS_H_
#define PST_COMMON_ROLE_TOKENS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/task_identity.h"

namespace pst::common {

// The tasks each token speaks for, keyed by the token's SHA-256 digest (32
// raw bytes). A value; thread-compatible.
class RoleTokens {
 public:
  // Parses a table (the format above). Errors: InvalidArgument naming the
  // line for a digest that is not 64 hex digits, a line with no task, a name
  // that is not a task name, a digest listed twice, or a task given to two
  // tokens; InvalidArgument for a table with no token.
  static absl::StatusOr<RoleTokens> Parse(absl::string_view text);

  // The tasks `token` speaks for; empty when it is not in the table.
  const std::vector<TaskIdentity>& TasksOf(absl::string_view token) const;

  bool empty() const { return tasks_.empty(); }
  size_t size() const { return tasks_.size(); }

 private:
  absl::flat_hash_map<std::string, std::vector<TaskIdentity>> tasks_;
};

// The SHA-256 digest of `data`: 32 raw bytes.
std::string Sha256(absl::string_view data);

}  // namespace pst::common

#endif  // PST_COMMON_ROLE_TOKENS_H_
