#include "chief/grpc_coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/grpc_caller.h"
#include "rpc/grpc_status.h"

namespace pst::chief {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(rpc::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

GrpcCoordinatorService::GrpcCoordinatorService(Coordinator* coordinator,
                                               EvaluationHistory* evaluations,
                                               const rpc::RpcSettings& settings)
    : coordinator_(coordinator), evaluations_(evaluations), security_(settings.security) {
  const std::string service = proto::Coordinator::service_full_name();
  BoundRequestSize(&GrpcCoordinatorService::Register, service, "Register", settings.limits);
  BoundRequestSize(&GrpcCoordinatorService::Heartbeat, service, "Heartbeat", settings.limits);
  BoundRequestSize(&GrpcCoordinatorService::WorkerDone, service, "WorkerDone", settings.limits);
  BoundRequestSize(&GrpcCoordinatorService::ClaimWorkerIndex, service, "ClaimWorkerIndex", settings.limits);
  BoundRequestSize(&GrpcCoordinatorService::GetState, service, "GetState", settings.limits);
  BoundRequestSize(&GrpcCoordinatorService::ReportEvaluation, service, "ReportEvaluation", settings.limits);
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::Register(grpc::CallbackServerContext* context,
                                                           const proto::RegisterRequest* request,
                                                           proto::RegisterResponse* response) {
  if (absl::Status allowed =
          rpc::RequireWorker(rpc::CallerOf(*context, security_), request->worker_index(), "Register");
      !allowed.ok()) {
    return Finish(context, allowed);
  }
  absl::StatusOr<proto::RegisterResponse> result = coordinator_->Register(*request, absl::Now());
  if (result.ok()) *response = *std::move(result);
  return Finish(context, result.status());
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                            const proto::HeartbeatRequest* request,
                                                            proto::HeartbeatResponse* response) {
  if (absl::Status allowed =
          rpc::RequireWorker(rpc::CallerOf(*context, security_), request->worker_index(), "Heartbeat");
      !allowed.ok()) {
    return Finish(context, allowed);
  }
  absl::StatusOr<proto::HeartbeatResponse> result = coordinator_->Heartbeat(*request, absl::Now());
  if (result.ok()) *response = *std::move(result);
  return Finish(context, result.status());
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::WorkerDone(
    grpc::CallbackServerContext* context, const proto::WorkerDoneRequest* request,
    proto::WorkerDoneResponse* response) {
  if (absl::Status allowed = rpc::RequireWorker(
          rpc::CallerOf(*context, security_), request->final_progress().worker_index(), "WorkerDone");
      !allowed.ok()) {
    return Finish(context, allowed);
  }
  return Finish(context, coordinator_->WorkerDone(*request, absl::Now()));
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::ClaimWorkerIndex(
    grpc::CallbackServerContext* context, const proto::ClaimWorkerIndexRequest* request,
    proto::ClaimWorkerIndexResponse* response) {
  // With per-role certificates a worker's index is in its certificate: a
  // claimed one would not match it.
  const rpc::Caller caller = rpc::CallerOf(*context, security_);
  if (caller.checked) {
    return Finish(
        context, absl::PermissionDeniedError(absl::StrCat(
                     "ClaimWorkerIndex is for workers that share one identity; the caller is ",
                     caller.tasks.empty() ? "a certificate that names no pstrain task" : caller.who,
                     ": with per-role certificates give each worker its index in TF_CONFIG")));
  }
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
  if (absl::Status allowed = rpc::RequireAnyTask(rpc::CallerOf(*context, security_), "GetState");
      !allowed.ok()) {
    return Finish(context, allowed);
  }
  *response = coordinator_->State();
  if (evaluations_ != nullptr) {
    for (const auto& [index, step] : evaluations_->ReportedSteps()) {
      (*response->mutable_evaluated_steps())[index] = step;
    }
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* GrpcCoordinatorService::ReportEvaluation(
    grpc::CallbackServerContext* context, const proto::EvaluationReport* request,
    proto::ReportEvaluationResponse* response) {
  if (absl::Status allowed = rpc::RequireEvaluator(
          rpc::CallerOf(*context, security_), request->evaluator_index(), "ReportEvaluation");
      !allowed.ok()) {
    return Finish(context, allowed);
  }
  if (evaluations_ == nullptr) {
    return Finish(context, absl::FailedPreconditionError(
                               "ReportEvaluation: this coordinator keeps no evaluations"));
  }
  if (absl::Status kept = evaluations_->Report(*request, absl::Now()); !kept.ok()) {
    return Finish(context, kept);
  }
  const proto::ClusterState state = coordinator_->State();
  response->set_phase(state.phase());
  response->set_final_checkpoint_step(state.final_checkpoint_step());
  return Finish(context, absl::OkStatus());
}

}  // namespace pst::chief
