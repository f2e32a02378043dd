// Transport security for every channel and server of a process: TLS or
// mutual TLS, and a shared token that every RPC carries.
//
//   --tls_cert, --tls_key  this process's certificate chain and key (PEM); a
//                          daemon that serves (ps, chief) needs them for TLS
//   --tls_ca               the cluster's CA (PEM): clients verify servers
//                          against it, and servers with it require and
//                          verify client certificates (mutual TLS)
//   --auth_token_file      a file whose content (surrounding whitespace
//                          removed) every RPC sends as "authorization:
//                          Bearer <token>"; servers answer UNAUTHENTICATED
//                          without it. Needs TLS: a bearer token on a
//                          plaintext connection is readable by anyone on the
//                          path, and gRPC sends call credentials only over
//                          secure channels.
//   --tls_server_name      the name clients expect in server certificates,
//                          when it is not the host in TF_CONFIG (one
//                          certificate for the whole cluster, say)
//   --role_tokens_file     servers: the table of per-role tokens
//                          (role_tokens.h); each caller's token names its
//                          task, and a token not in the table is
//                          UNAUTHENTICATED. Each task then sends its own
//                          token with --auth_token_file. Needs TLS.
//
// Roles: its servers know each caller's task, and the gRPC services refuse
// calls the caller's role may not make (grpc_caller.h), in two cases:
//   - per-role tokens (--role_tokens_file): the task comes from the
//     caller's token; certificates then only encrypt and admit callers;
//   - per-role certificates: this process's certificate names a pstrain
//     task (task_identity.h) and mutual TLS is on; the task comes from the
//     caller's certificate.
// Otherwise (plaintext, TLS without client certificates or one certificate
// with no task name shared by every daemon, and no table) roles cannot be
// told apart and every authenticated caller may make every call, as a
// single shared token does.
//
// The daemons' mains load it from the flags (RpcSettingsFromFlags in
// flags/job_flags.h) and hand it down inside rpc::RpcSettings to every
// channel and server they make (the credentials: rpc/grpc_credentials.h).
// The grpc.health.v1 service is covered too: health checkers need the same
// certificate and token.
#ifndef PST_COMMON_TRANSPORT_SECURITY_H_
#define PST_COMMON_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/role_tokens.h"
#include "common/task_identity.h"

namespace pst::common {

struct SecurityFiles {
  std::string tls_cert, tls_key, tls_ca, auth_token_file, tls_server_name, role_tokens_file;
};

struct TransportSecurity {
  std::string cert_pem, key_pem, ca_pem;  // empty: not given
  std::string token;                      // empty: no token
  std::string server_name;                // empty: the address's host
  std::vector<TaskIdentity> cert_tasks;   // the tasks cert_pem names
  RoleTokens role_tokens;                 // empty: no per-role tokens
  bool tls() const { return !ca_pem.empty() || !cert_pem.empty(); }
  // Servers take roles from callers' tokens.
  bool token_roles() const { return !role_tokens.empty(); }
  // Servers take roles from callers' certificates: mutual TLS, this
  // process's certificate follows the per-role naming convention (so the
  // cluster's do too), and no per-role tokens.
  bool cert_roles() const { return !token_roles() && !ca_pem.empty() && !cert_tasks.empty(); }
  // Servers enforce roles.
  bool roles() const { return token_roles() || cert_roles(); }
};

// The auth context property under which a server records the tasks a
// caller's role token speaks for (one value a task, as task names).
inline constexpr char kTokenTaskProperty[] = "pstrain_token_task";

// Reads and checks the files. Errors: InvalidArgument naming the flag for a
// certificate without its key (or the reverse), a file that is not PEM, an
// empty token, a token or a table of role tokens without TLS, or a table
// that does not parse (naming its line); NotFound naming the flag and path
// for a file that cannot be read.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(const SecurityFiles& files);

// What the flags' help and the logs say of `security`: "plaintext",
// "TLS", "mutual TLS", each with ", token" when one is set, then ", roles"
// (certificates), ", role tokens" or, for mutual TLS without either,
// ", no roles".
std::string DescribeTransportSecurity(const TransportSecurity& security);

}  // namespace pst::common

#endif  // PST_COMMON_TRANSPORT_SECURITY_H_
