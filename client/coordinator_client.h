// How a worker reaches the coordinator (the chief): register, heartbeat,
// report done, claim an index. The gRPC implementation
// (client/grpc_coordinator_client.h) is the real one; an in-process one
// (chief/in_process_coordinator_client.h) calls the chief's Coordinator
// directly, so a whole cluster runs in one test process.
//
// Every call is synchronous and bounded by `timeout`. Errors are the
// coordinator's own (chief/coordinator.h: Unavailable while it initializes
// or recovers, FailedPrecondition for a worker it does not know, Aborted for
// a stale incarnation or generation, ...), and Unavailable or
// DeadlineExceeded when it did not answer in time.
//
// Thread-safety: implementations are safe for concurrent calls.
#ifndef PST_CLIENT_COORDINATOR_CLIENT_H_
#define PST_CLIENT_COORDINATOR_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/pstrain.pb.h"

namespace pst::client {

class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;

  // Waits for a coordinator that is not up yet, until `timeout`.
  virtual absl::StatusOr<proto::RegisterResponse> Register(const proto::RegisterRequest& request,
                                                           absl::Duration timeout) = 0;
  virtual absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& request,
                                                             absl::Duration timeout) = 0;
  virtual absl::Status WorkerDone(const proto::WorkerDoneRequest& request,
                                  absl::Duration timeout) = 0;
  // Waits for a coordinator that is not up yet, until `timeout`.
  virtual absl::StatusOr<proto::ClaimWorkerIndexResponse> ClaimWorkerIndex(
      const proto::ClaimWorkerIndexRequest& request, absl::Duration timeout) = 0;
};

}  // namespace pst::client

#endif  // PST_CLIENT_COORDINATOR_CLIENT_H_
