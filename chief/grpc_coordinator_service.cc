#include "chief/grpc_coordinator_service.h"

#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace pst::chief {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(common::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

GrpcCoordinatorService::GrpcCoordinatorService(Coordinator* coordinator)
    : coordinator_(coordinator) {
  const std::string service = proto::Coordinator::service_full_name();
  BoundRequestSize(&GrpcCoordinatorService::Register, service, "Register");
  BoundRequestSize(&GrpcCoordinatorService::Heartbeat, service, "Heartbeat");
  BoundRequestSize(&GrpcCoordinatorService::WorkerDone, service, "WorkerDone");
  BoundRequestSize(&GrpcCoordinatorService::ClaimWorkerIndex, service, "ClaimWorkerIndex");
  BoundRequestSize(&GrpcCoordinatorService::GetState, service, "GetState");
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::Register(grpc::CallbackServerContext* context,
                                                           const proto::RegisterRequest* request,
                                                           proto::RegisterResponse* response) {
  absl::StatusOr<proto::RegisterResponse> result = coordinator_->Register(*request, absl::Now());
  if (result.ok()) *response = *std::move(result);
  return Finish(context, result.status());
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                            const proto::HeartbeatRequest* request,
                                                            proto::HeartbeatResponse* response) {
  absl::StatusOr<proto::HeartbeatResponse> result = coordinator_->Heartbeat(*request, absl::Now());
  if (result.ok()) *response = *std::move(result);
  return Finish(context, result.status());
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::WorkerDone(
    grpc::CallbackServerContext* context, const proto::WorkerDoneRequest* request,
    proto::WorkerDoneResponse* response) {
  return Finish(context, coordinator_->WorkerDone(*request, absl::Now()));
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::ClaimWorkerIndex(
    grpc::CallbackServerContext* context, const proto::ClaimWorkerIndexRequest* request,
    proto::ClaimWorkerIndexResponse* response) {
  absl::StatusOr<int> index = coordinator_->ClaimWorkerIndex(request->claimant());
  if (index.ok()) {
    response->set_index(*index);
    response->set_num_workers(coordinator_->State().num_workers());
  }
  return Finish(context, index.status());
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::GetState(grpc::CallbackServerContext* context,
                                                           const proto::GetStateRequest* request,
                                                           proto::ClusterState* response) {
  *response = coordinator_->State();
  return Finish(context, absl::OkStatus());
}

}  // namespace pst::chief
