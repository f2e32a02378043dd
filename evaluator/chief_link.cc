#include "evaluator/chief_link.h"

#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::evaluator {
namespace {

// Calls wait for the connection until their deadline: an evaluator that
// starts before the chief serves would otherwise keep failing fast on the
// channel's last failed connect.
class GrpcChiefLink final : public ChiefLink {
 public:
  GrpcChiefLink(const std::string& address, const rpc::RpcSettings& settings)
      : stub_(proto::Coordinator::NewStub(rpc::MakeChannel(address, settings))) {}

  absl::StatusOr<proto::ClusterState> GetState(absl::Duration timeout) override {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, timeout, /*wait_for_ready=*/true);
    proto::ClusterState state;
    const grpc::Status status = stub_->GetState(&context, proto::GetStateRequest(), &state);
    if (!status.ok()) return rpc::FromGrpcStatus(status);
    return state;
  }

  absl::StatusOr<proto::ReportEvaluationResponse> ReportEvaluation(
      const proto::EvaluationReport& report, absl::Duration timeout) override {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, timeout, /*wait_for_ready=*/true);
    proto::ReportEvaluationResponse response;
    const grpc::Status status = stub_->ReportEvaluation(&context, report, &response);
    if (!status.ok()) return rpc::FromGrpcStatus(status);
    return response;
  }

 private:
  std::unique_ptr<proto::Coordinator::Stub> stub_;
};

}  // namespace

std::unique_ptr<ChiefLink> MakeGrpcChiefLink(const std::string& address,
                                             const rpc::RpcSettings& settings) {
  return std::make_unique<GrpcChiefLink>(address, settings);
}

}  // namespace pst::evaluator
