#include "client/grpc_ps_control.h"

#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::client {
namespace {

class GrpcPsControl final : public common::PsControl {
 public:
  GrpcPsControl(const std::vector<std::string>& addresses, const rpc::RpcSettings& settings) {
    for (const std::string& address : addresses) {
      stubs_.push_back(proto::ParameterServer::NewStub(rpc::MakeChannel(address, settings)));
    }
  }

  int num_ps() const override { return static_cast<int>(stubs_.size()); }

  absl::StatusOr<proto::CreateVariablesResponse> CreateVariables(
      int ps, const proto::CreateVariablesRequest& request, absl::Duration timeout) override {
    return Call(&Stub::CreateVariables, ps, request, timeout, /*wait_for_ready=*/true);
  }
  absl::StatusOr<proto::HealthResponse> Health(int ps, const proto::HealthRequest& request,
                                               absl::Duration timeout) override {
    return Call(&Stub::Health, ps, request, timeout);
  }
  absl::StatusOr<proto::MembershipResponse> SetMembership(int ps,
                                                          const proto::MembershipRequest& request,
                                                          absl::Duration timeout) override {
    return Call(&Stub::SetMembership, ps, request, timeout);
  }
  absl::StatusOr<proto::RolesResponse> SetRoles(int ps, const proto::RolesRequest& request,
                                                absl::Duration timeout) override {
    return Call(&Stub::SetRoles, ps, request, timeout);
  }
  absl::StatusOr<proto::SaveResponse> Save(int ps, const proto::SaveRequest& request,
                                           absl::Duration timeout) override {
    return Call(&Stub::Save, ps, request, timeout);
  }
  absl::StatusOr<proto::RestoreResponse> Restore(int ps, const proto::RestoreRequest& request,
                                                 absl::Duration timeout) override {
    return Call(&Stub::Restore, ps, request, timeout);
  }
  absl::Status Shutdown(int ps, const proto::ShutdownRequest& request,
                        absl::Duration timeout) override {
    return Call(&Stub::Shutdown, ps, request, timeout).status();
  }

 private:
  using Stub = proto::ParameterServer::Stub;

  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                int ps, const Request& request, absl::Duration timeout,
                                bool wait_for_ready = false) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, timeout, wait_for_ready);
    Response response;
    grpc::Status status = (stubs_[ps].get()->*method)(&context, request, &response);
    if (!status.ok()) return rpc::FromGrpcStatus(status);
    return response;
  }

  std::vector<std::unique_ptr<Stub>> stubs_;
};

}  // namespace

std::unique_ptr<common::PsControl> MakeGrpcPsControl(const std::vector<std::string>& addresses,
                                                     const rpc::RpcSettings& settings) {
  return std::make_unique<GrpcPsControl>(addresses, settings);
}

}  // namespace pst::client
