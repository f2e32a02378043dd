// Small tools for deploying a cluster by hand or from an orchestrator:
// building a TF_CONFIG from host lists, and asking a daemon whether it is
// serving (the standard grpc.health.v1 service every pstrain server runs,
// which Kubernetes' gRPC probes also call).
#ifndef PST_TOOLS_DEPLOY_TOOLS_H_
#define PST_TOOLS_DEPLOY_TOOLS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pst::tools {

struct TfConfigHosts {
  std::string chief, ps, worker, evaluator;  // comma-separated host[:port] lists
  std::string task_type;                     // chief, ps, worker or evaluator
  int task_index = 0;
  int default_port = 2222;  // for a host given without a port
};

// The TF_CONFIG JSON for one task of the cluster the lists describe.
// Errors: InvalidArgument, naming the problem, for anything ParseTfConfig
// rejects (no ps, no worker, a duplicate address, an unknown task type, an
// index out of range, a malformed host:port).
absl::StatusOr<std::string> BuildTfConfig(const TfConfigHosts& hosts);

// Asks the grpc.health.v1 service at `address` (host:port) about the whole
// server. Returns its status name ("SERVING", "NOT_SERVING", ...).
// Errors: the gRPC error (Unavailable for nothing listening, DeadlineExceeded
// after `timeout`), with the address in the message; DataLoss for an answer
// that is not a HealthCheckResponse.
absl::StatusOr<std::string> CheckHealth(const std::string& address, absl::Duration timeout);

}  // namespace pst::tools

#endif  // PST_TOOLS_DEPLOY_TOOLS_H_
