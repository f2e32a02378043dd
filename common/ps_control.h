// How the chief (and a worker asking where its pushes left off) reaches the
// parameter servers' control calls: everything but the data plane, which is
// common/ps_transport.h. The gRPC implementation (client/grpc_ps_control.h)
// is the real one; an in-process one (ps_server/in_process_control.h) calls
// the ps logic directly, so a whole cluster runs in one test process.
//
// Every call is synchronous, one ps at a time, and bounded by `timeout`.
// Errors are the ps's own (see each call's logic in ps_server/node/ps_node.h and
// ps_server/store/variable_store.h), and Unavailable or DeadlineExceeded when the
// ps did not answer in time (a call worth retrying).
//
// Thread-safety: implementations are safe for concurrent calls, to one ps
// too.
#ifndef PST_COMMON_PS_CONTROL_H_
#define PST_COMMON_PS_CONTROL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

class PsControl {
 public:
  virtual ~PsControl() = default;

  virtual int num_ps() const = 0;

  // Creates (idempotently) the ps's variables; this one call waits for a ps
  // that is not up yet, until `timeout`.
  // REQUIRES (every call): 0 <= ps < num_ps().
  virtual absl::StatusOr<proto::CreateVariablesResponse> CreateVariables(
      int ps, const proto::CreateVariablesRequest& request, absl::Duration timeout) = 0;
  // The ps's incarnation, generation, sizes and training figures.
  virtual absl::StatusOr<proto::HealthResponse> Health(int ps, const proto::HealthRequest& request,
                                                       absl::Duration timeout) = 0;
  // The workers still training, and the SYNC quorum.
  virtual absl::StatusOr<proto::MembershipResponse> SetMembership(
      int ps, const proto::MembershipRequest& request, absl::Duration timeout) = 0;
  // Replicated jobs: where every shard's copies are now (a failover).
  virtual absl::StatusOr<proto::RolesResponse> SetRoles(int ps, const proto::RolesRequest& request,
                                                        absl::Duration timeout) = 0;
  // One phase of a checkpoint save. ResourceExhausted while the ps runs as
  // many saves and restores as it may (retry later).
  virtual absl::StatusOr<proto::SaveResponse> Save(int ps, const proto::SaveRequest& request,
                                                   absl::Duration timeout) = 0;
  // Loads the ps's variables from a checkpoint, in a restore generation.
  // ResourceExhausted as Save.
  virtual absl::StatusOr<proto::RestoreResponse> Restore(int ps,
                                                         const proto::RestoreRequest& request,
                                                         absl::Duration timeout) = 0;
  // Tells the ps to exit.
  virtual absl::Status Shutdown(int ps, const proto::ShutdownRequest& request,
                                absl::Duration timeout) = 0;
};

}  // namespace pst::common

#endif  // PST_COMMON_PS_CONTROL_H_
