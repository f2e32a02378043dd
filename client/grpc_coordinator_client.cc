#include "client/grpc_coordinator_client.h"

#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::client {
namespace {

class GrpcCoordinatorClient final : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(const std::string& address, const rpc::RpcSettings& settings)
      : stub_(proto::Coordinator::NewStub(rpc::MakeChannel(address, settings))) {}

  absl::StatusOr<proto::RegisterResponse> Register(const proto::RegisterRequest& request,
                                                   absl::Duration timeout) override {
    return Call(&Stub::Register, request, timeout, /*wait_for_ready=*/true);
  }
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& request,
                                                     absl::Duration timeout) override {
    return Call(&Stub::Heartbeat, request, timeout);
  }
  absl::Status WorkerDone(const proto::WorkerDoneRequest& request,
                          absl::Duration timeout) override {
    return Call(&Stub::WorkerDone, request, timeout).status();
  }
  absl::StatusOr<proto::ClaimWorkerIndexResponse> ClaimWorkerIndex(
      const proto::ClaimWorkerIndexRequest& request, absl::Duration timeout) override {
    return Call(&Stub::ClaimWorkerIndex, request, timeout, /*wait_for_ready=*/true);
  }

 private:
  using Stub = proto::Coordinator::Stub;

  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                const Request& request, absl::Duration timeout,
                                bool wait_for_ready = false) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, timeout, wait_for_ready);
    Response response;
    grpc::Status status = (stub_.get()->*method)(&context, request, &response);
    if (!status.ok()) return rpc::FromGrpcStatus(status);
    return response;
  }

  std::unique_ptr<Stub> stub_;
};

}  // namespace

std::unique_ptr<CoordinatorClient> MakeGrpcCoordinatorClient(const std::string& address,
                                                             const rpc::RpcSettings& settings) {
  return std::make_unique<GrpcCoordinatorClient>(address, settings);
}

}  // namespace pst::client
