// Small tools for deploying a cluster by hand or from an orchestrator:
// building a TF_CONFIG from host lists, and asking a daemon whether it is
// serving (the standard grpc.health.v1 service every pstrain server runs,
// which Kubernetes' gRPC probes also call).
#ifndef PST_TOOLS_DEPLOY_TOOLS_H_
#define PST_TOOLS_DEPLOY_TOOLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tf_config.h"
#include "rpc/grpc_channel.h"

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
// server, over a channel made under `settings`. Returns its status name ("SERVING", "NOT_SERVING", ...).
// Errors: the gRPC error (Unavailable for nothing listening, DeadlineExceeded
// after `timeout`), with the address in the message; DataLoss for an answer
// that is not a HealthCheckResponse.
absl::StatusOr<std::string> CheckHealth(const std::string& address,
                                        const rpc::RpcSettings& settings,
                                        absl::Duration timeout);

// Preflight for one task of `config` on this machine: what would stop it
// from joining the cluster, one line per problem, e.g.
//   "ps:0: port 2222 is in use on this machine (address already in use)"
//   "worker:1: host 'wrker1' does not resolve (Name or service not known)"
//   "chief:0: '10.0.0.9' is not an address of this machine ..."
// Checks: this task's port can be bound (ps and chief listen; workers do
// not), this task's host is an address of this machine, every peer's host
// resolves, and with wait > 0, that every ps and the coordinator answer
// health within `wait`. `notes` gets one line per check that passed.
struct Preflight {
  std::vector<std::string> problems;
  std::vector<std::string> notes;
};
Preflight CheckTask(const common::TfConfig& config, const rpc::RpcSettings& settings,
                    absl::Duration wait);

}  // namespace pst::tools

#endif  // PST_TOOLS_DEPLOY_TOOLS_H_
