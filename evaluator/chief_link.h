// How an evaluator reaches the chief: the job's state (GetState) and its
// reports (ReportEvaluation). The gRPC version is the real one; tests give
// the evaluator session one of their own.
//
// Thread-safety: implementations are safe for concurrent calls.
#ifndef PST_EVALUATOR_CHIEF_LINK_H_
#define PST_EVALUATOR_CHIEF_LINK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/pstrain.pb.h"
#include "rpc/grpc_channel.h"

namespace pst::evaluator {

class ChiefLink {
 public:
  virtual ~ChiefLink() = default;
  // The coordinator's errors, or Unavailable / DeadlineExceeded when it did
  // not answer within `timeout`.
  virtual absl::StatusOr<proto::ClusterState> GetState(absl::Duration timeout) = 0;
  virtual absl::StatusOr<proto::ReportEvaluationResponse> ReportEvaluation(
      const proto::EvaluationReport& report, absl::Duration timeout) = 0;
};

// The coordinator at `address` ("host:port"), over a channel made under
// `settings`.
std::unique_ptr<ChiefLink> MakeGrpcChiefLink(const std::string& address,
                                             const rpc::RpcSettings& settings);

}  // namespace pst::evaluator

#endif  // PST_EVALUATOR_CHIEF_LINK_H_
