// The ParameterServer gRPC service: unpacks each request, calls the
// VariableStore, converts the status and finishes. No training logic here.
//
// Uses gRPC's callback API. Handlers do bounded CPU work (validate, copy,
// apply) and never wait: a pull that must wait for a version (SYNC) or for
// slower workers (SSP) is parked in the store and finished later by the
// push that makes it ready, holding no gRPC thread meanwhile.
#ifndef PST_PS_SERVER_GRPC_PS_SERVICE_H_
#define PST_PS_SERVER_GRPC_PS_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rpc/grpc_bounded_service.h"
#include "rpc/grpc_channel.h"
#include "common/process.h"
#include "proto/pstrain.grpc.pb.h"
#include "ps_server/node/ps_node.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

// Pull, Push and PushPull, the dense data plane, are served as raw bytes:
// the request is parsed here, gradients are applied from the slices they
// arrived in, and the values' payloads go out as slices that own the
// strings the store filled, with no serialization copy either way
// (rpc/wire_codec.h). The bytes are the same protobuf messages.
using ParameterServerBase = proto::ParameterServer::WithRawCallbackMethod_Pull<
    proto::ParameterServer::WithRawCallbackMethod_Push<
        proto::ParameterServer::WithRawCallbackMethod_PushPull<
            proto::ParameterServer::CallbackService>>>;

// Thread-safe. Does not own the store. Every call checks the caller and runs
// PsNode's logic (node/ps_node.h),
// but for the pulls of dense variables, which read the store directly. They and
// Shutdown refuse requests over
// ServerLimits::max_control_message_bytes RESOURCE_EXHAUSTED unparsed
// (rpc/grpc_bounded_service.h); the data plane takes kMaxMessageBytes.
class GrpcPsService final : public rpc::BoundedService<ParameterServerBase> {
 public:
  // `node`: the node's identity, checkpoint directory, replica links and
  // test hooks (PsNode::Options); its store_options are taken from `store`.
  // A Shutdown call stops `stop`. `settings`: the server's (its callers'
  // roles, its control limits, and the channels of its replica links).
  GrpcPsService(VariableStore* store, PsNode::Options node, common::StopSignal* stop,
                const rpc::RpcSettings& settings);

  // Saves and restores running at once at most; more are refused with
  // RESOURCE_EXHAUSTED.
  static constexpr int kMaxBackgroundJobs = PsNode::kMaxBackgroundJobs;

  grpc::ServerUnaryReactor* CreateVariables(grpc::CallbackServerContext* context,
                                            const proto::CreateVariablesRequest* request,
                                            proto::CreateVariablesResponse* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PullRows(grpc::CallbackServerContext* context,
                                     const proto::PullRowsRequest* request,
                                     proto::PullRowsResponse* response) override;
  grpc::ServerUnaryReactor* PushRows(grpc::CallbackServerContext* context,
                                     const proto::PushRowsRequest* request,
                                     proto::PushRowsResponse* response) override;
  grpc::ServerUnaryReactor* SetMembership(grpc::CallbackServerContext* context,
                                          const proto::MembershipRequest* request,
                                          proto::MembershipResponse* response) override;
  // On a thread of its own: PsNode::Save (its phases and errors).
  grpc::ServerUnaryReactor* Save(grpc::CallbackServerContext* context,
                                 const proto::SaveRequest* request,
                                 proto::SaveResponse* response) override;
  // On a thread of its own: PsNode::Restore (its errors).
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context,
                                    const proto::RestoreRequest* request,
                                    proto::RestoreResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest* request,
                                   proto::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* context,
                                     const proto::ShutdownRequest* request,
                                     proto::ShutdownResponse* response) override;
  // From the chief: the layout of a replicated job (PsNode::SetRoles).
  grpc::ServerUnaryReactor* SetRoles(grpc::CallbackServerContext* context,
                                     const proto::RolesRequest* request,
                                     proto::RolesResponse* response) override;
  // From another ps: a change of a shard this ps backs up (PsNode::Replicate).
  grpc::ServerUnaryReactor* Replicate(grpc::CallbackServerContext* context,
                                      const proto::ReplicateRequest* request,
                                      proto::ReplicateResponse* response) override;

  // The full names ("/pst.proto.ParameterServer/Pull") of the methods
  // ParameterServerBase serves raw.
  static std::vector<std::string> RawMethodNames();

  // Last time the chief was heard from (a Health call from the chief, or
  // any CreateVariables), for the ps's own chief-lost timeout.
  absl::Time last_chief_contact() const;

  // Refuses Save and Restore from now on, and waits until every one running
  // has finished its call. REQUIRES: called before the server shuts down.
  void StopBackgroundWork();

  // Every store this ps serves as primary (PsNode::PrimaryStores): parked
  // pulls are expired and cancelled in each.
  std::vector<std::shared_ptr<VariableStore>> PrimaryStores() const {
    return node_.PrimaryStores();
  }

 private:
  void TouchChief();

  VariableStore* const store_;
  std::atomic<int64_t> last_chief_contact_ns_;
  common::StopSignal* const stop_;
  const common::TransportSecurity security_;  // whose callers' roles it checks
  // The control calls' logic, with the saves and restores running on their
  // own threads. Last: destroyed (joined) first.
  PsNode node_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_GRPC_PS_SERVICE_H_
