// The Coordinator gRPC service: unpack, call Coordinator, convert, finish.
#ifndef PST_CHIEF_GRPC_COORDINATOR_SERVICE_H_
#define PST_CHIEF_GRPC_COORDINATOR_SERVICE_H_

#include "chief/coordinator.h"
#include "chief/evaluations.h"
#include "rpc/grpc_bounded_service.h"
#include "rpc/grpc_channel.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::chief {

// Thread-safe. Owns neither the coordinator nor the evaluation history (null:
// ReportEvaluation is refused FAILED_PRECONDITION). Every method is a control call:
// requests over ServerLimits::max_control_message_bytes are refused
// RESOURCE_EXHAUSTED unparsed (rpc/grpc_bounded_service.h).
class GrpcCoordinatorService final
    : public rpc::BoundedService<proto::Coordinator::CallbackService> {
 public:
  // `settings`: the server's (its callers' roles, its control limits).
  GrpcCoordinatorService(Coordinator* coordinator, EvaluationHistory* evaluations,
                         const rpc::RpcSettings& settings);

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const proto::RegisterRequest* request,
                                     proto::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const proto::HeartbeatRequest* request,
                                      proto::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* WorkerDone(grpc::CallbackServerContext* context,
                                       const proto::WorkerDoneRequest* request,
                                       proto::WorkerDoneResponse* response) override;
  grpc::ServerUnaryReactor* ClaimWorkerIndex(grpc::CallbackServerContext* context,
                                             const proto::ClaimWorkerIndexRequest* request,
                                             proto::ClaimWorkerIndexResponse* response) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context,
                                     const proto::GetStateRequest* request,
                                     proto::ClusterState* response) override;
  grpc::ServerUnaryReactor* ReportEvaluation(grpc::CallbackServerContext* context,
                                             const proto::EvaluationReport* request,
                                             proto::ReportEvaluationResponse* response) override;

 private:
  Coordinator* const coordinator_;
  EvaluationHistory* const evaluations_;
  const common::TransportSecurity security_;
};

}  // namespace pst::chief

#endif  // PST_CHIEF_GRPC_COORDINATOR_SERVICE_H_
