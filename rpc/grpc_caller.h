// Who is calling a gRPC service, and whether the caller's role allows the
// call: the roles of a pstrain cluster read from the caller's token or
// certificate.
//
// Roles are checked only when this process's transport security enforces
// them (common::TransportSecurity::roles()). Under per-role tokens a caller's tasks
// are those its token speaks for (role_tokens.h); under per-role
// certificates, those its verified certificate names (task_identity.h), and
// a certificate that names none has no role. Otherwise (plaintext, or one
// shared certificate with no task name and no token table) roles cannot be
// known and every check passes, as before roles existed.
//
//   chief     Save, Restore, SetMembership, CreateVariables, Shutdown on a
//             ps; pulls for evaluation
//   worker i  pushes and pulls as worker i; Register, Heartbeat, WorkerDone
//             as worker i on the chief
//   evaluator i  ReportEvaluation as evaluator i, GetState on the chief
//   ps        Replicate on another ps (replicated jobs: a primary forwards
//             its shard's changes to the backup)
//
// Services check at the top of each handler and refuse with
// PERMISSION_DENIED naming the role the call needs and the caller.
#ifndef PST_RPC_GRPC_CALLER_H_
#define PST_RPC_GRPC_CALLER_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/task_identity.h"
#include "common/transport_security.h"

namespace pst::rpc {

// A call's caller. A value; thread-compatible.
struct Caller {
  bool checked = false;             // false: roles unknown, every check passes
  std::vector<common::TaskIdentity> tasks;  // the tasks it speaks for (checked only)
  std::string who;                  // its names, for messages

  bool Is(common::TaskType type, int index) const;
  bool IsChief() const;                    // chief 0
  std::optional<int> WorkerIndex() const;  // the worker it is, if any
};

// A caller named by `names` (its certificate's SANs, then its CN).
Caller CallerFromNames(const std::vector<std::string>& names);

// The caller of a call to a server running under `security`: unchecked
// unless security.roles().
Caller CallerOf(const grpc::ServerContextBase& context,
                const common::TransportSecurity& security);

// OK when `caller` may make `call`; PERMISSION_DENIED naming the role it
// needs and the caller otherwise.
//   RequireChief          the chief only
//   RequireWorker         worker `worker_index` only
//   RequireChiefOrWorker  the chief, or a worker acting as itself
//                         (`worker_index` its own, or -1 for none)
//   RequireEvaluator      evaluator `evaluator_index` only
//   RequireAnyTask        the chief, any worker or any evaluator
//   RequirePs             any ps
absl::Status RequireChief(const Caller& caller, absl::string_view call);
absl::Status RequireWorker(const Caller& caller, int worker_index, absl::string_view call);
absl::Status RequireChiefOrWorker(const Caller& caller, int worker_index, absl::string_view call);
absl::Status RequireEvaluator(const Caller& caller, int evaluator_index, absl::string_view call);
absl::Status RequireAnyTask(const Caller& caller, absl::string_view call);
absl::Status RequirePs(const Caller& caller, absl::string_view call);

}  // namespace pst::rpc

#endif  // PST_RPC_GRPC_CALLER_H_
