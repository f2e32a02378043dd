#include "ps_server/replication/grpc_replica_link.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::ps {
namespace {

class GrpcReplicaLink final : public ReplicaLink {
 public:
  GrpcReplicaLink(const std::string& address, const rpc::RpcSettings& settings,
                  absl::Duration timeout, absl::Duration startup_timeout)
      : address_(address),
        timeout_(timeout),
        startup_timeout_(startup_timeout),
        stub_(proto::ParameterServer::NewStub(rpc::MakeChannel(address, settings))) {}

  void Send(std::shared_ptr<const proto::ReplicateRequest> request, Done done) override {
    // One forward in flight: alive until gRPC's callback.
    struct Call {
      grpc::ClientContext context;
      std::shared_ptr<const proto::ReplicateRequest> request;
      proto::ReplicateResponse response;
      Done done;
    };
    auto* call = new Call;
    const bool first = request->seq() == 1;
    rpc::SetDeadline(&call->context, first ? startup_timeout_ : timeout_,
                        /*wait_for_ready=*/first);
    call->request = std::move(request);
    call->done = std::move(done);
    stub_->async()->Replicate(
        &call->context, call->request.get(), &call->response,
        [call, address = address_](grpc::Status status) {
          absl::Status s = rpc::FromGrpcStatus(status);
          if (!s.ok()) {
            s = absl::Status(s.code(), absl::StrCat("backup at ", address, ": ", s.message()));
          }
          Done done = std::move(call->done);
          delete call;
          done(s);
        });
  }

 private:
  const std::string address_;
  const absl::Duration timeout_;
  const absl::Duration startup_timeout_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

}  // namespace

std::unique_ptr<ReplicaLink> MakeGrpcReplicaLink(const std::string& address,
                                                 const rpc::RpcSettings& settings,
                                                 absl::Duration timeout,
                                                 absl::Duration startup_timeout) {
  return std::make_unique<GrpcReplicaLink>(address, settings, timeout, startup_timeout);
}

}  // namespace pst::ps
