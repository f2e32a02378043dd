#include "client/grpc_ps_transport.h"

#include <grpcpp/generic/generic_stub.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
#include "rpc/wire_codec.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::client {
namespace {

// The dense calls of one worker to one ps go over this many TCP
// connections, taken in turn: one HTTP/2 connection is processed by one
// thread at a time at each end, and with PsClient's 4 requests in flight
// per ps it was the bottleneck (ps_bench PushPull 1M floats, 1 ps, 1 worker:
// 1.88 GB/s on 1 connection, 2.16 on 2, 2.31-2.59 on 4).
constexpr int kConnectionsPerPs = 4;

std::atomic<int64_t> sent_bytes{0};
std::atomic<int64_t> received_bytes{0};

void CountSent(size_t bytes) {
  sent_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}
void CountReceived(size_t bytes) {
  received_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

class GrpcPsTransport final : public common::PsTransport {
 public:
  GrpcPsTransport(const std::vector<std::string>& addresses, const rpc::RpcSettings& settings,
                  absl::Duration rpc_timeout)
      : addresses_(addresses), rpc_timeout_(rpc_timeout) {
    for (const std::string& address : addresses) {
      stubs_.push_back(proto::ParameterServer::NewStub(rpc::MakeChannel(address, settings)));
      std::vector<std::unique_ptr<grpc::GenericStub>> pool;
      for (int c = 0; c < kConnectionsPerPs; ++c) {
        pool.push_back(std::make_unique<grpc::GenericStub>(rpc::MakeChannel(address, settings, 1 + c)));
      }
      generic_.push_back(std::move(pool));
      next_.push_back(std::make_unique<std::atomic<uint32_t>>(0));
    }
  }

  int num_ps() const override { return static_cast<int>(stubs_.size()); }

  void Pull(int ps, const proto::PullRequest* request, proto::PullResponse* response,
            Done done) override {
    grpc::ClientContext* context = NewContext();
    CountSent(request->ByteSizeLong());
    stubs_[ps]->async()->Pull(context, request, response,
                              Finisher(context, response, std::move(done)));
  }
  void Push(int ps, const proto::PushRequest* request, proto::PushResponse* response,
            Done done) override {
    grpc::ClientContext* context = NewContext();
    CountSent(request->ByteSizeLong());
    stubs_[ps]->async()->Push(context, request, response,
                              Finisher(context, response, std::move(done)));
  }
  void PushPull(int ps, const proto::PushPullRequest* request, proto::PullResponse* response,
                Done done) override {
    grpc::ClientContext* context = NewContext();
    CountSent(request->ByteSizeLong());
    stubs_[ps]->async()->PushPull(context, request, response,
                                  Finisher(context, response, std::move(done)));
  }
  void PullRows(int ps, const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                Done done) override {
    grpc::ClientContext* context = NewContext();
    CountSent(request->ByteSizeLong());
    stubs_[ps]->async()->PullRows(context, request, response,
                                  Finisher(context, response, std::move(done)));
  }
  void PushRows(int ps, const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                Done done) override {
    grpc::ClientContext* context = NewContext();
    CountSent(request->ByteSizeLong());
    stubs_[ps]->async()->PushRows(context, request, response,
                                  Finisher(context, response, std::move(done)));
  }
  std::string Describe(int ps) const override {
    return absl::StrCat("ps ", ps, " at ", addresses_[ps]);
  }

  // The dense calls go out as raw bytes (rpc/wire_codec.h): gradients
  // from the caller's buffers, values straight into them.
  void PullDense(int ps, const proto::PullRequest* request, const common::DenseBuffers* buffers,
                 proto::PullResponse* response, Done done) override {
    auto* call = new RawCall(rpc_timeout_);
    call->request = rpc::SerializeMessage(*request);
    StartPull(ps, kPull, call, buffers, response, std::move(done));
  }
  void PushPullDense(int ps, const proto::PushPullRequest* request,
                     const common::DenseBuffers* buffers, proto::PullResponse* response,
                     Done done) override {
    auto* call = new RawCall(rpc_timeout_);
    call->request = rpc::EncodePushPull(*request, buffers->gradients, buffers->pins);
    StartPull(ps, kPushPull, call, buffers, response, std::move(done));
  }
  void PushDense(int ps, const proto::PushRequest* request, const common::DenseBuffers* buffers,
                 proto::PushResponse* response, Done done) override {
    auto* call = new RawCall(rpc_timeout_);
    call->request = rpc::EncodePush(*request, buffers->gradients, buffers->pins);
    CountSent(call->request.Length());
    Generic(ps)->UnaryCall(
        &call->context, Method("Push"), grpc::StubOptions(), &call->request, &call->response,
        [call, response, done = std::move(done)](grpc::Status status) {
          absl::Status result = rpc::FromGrpcStatus(status);
          if (result.ok()) CountReceived(call->response.Length());
          if (result.ok() && !rpc::ParseMessage(&call->response, response).ok()) {
            result = absl::DataLossError("malformed PushResponse");
          }
          delete call;
          done(std::move(result));
        });
  }

 private:
  enum PullKind { kPull, kPushPull };
  // A raw call's context and bytes, alive until it completes.
  struct RawCall {
    explicit RawCall(absl::Duration timeout) { rpc::SetDeadline(&context, timeout); }
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
  };

  grpc::GenericStub* Generic(int ps) {
    auto& pool = generic_[ps];
    return pool[next_[ps]->fetch_add(1, std::memory_order_relaxed) % pool.size()].get();
  }

  static std::string Method(const char* name) {
    return absl::StrCat("/", proto::ParameterServer::service_full_name(), "/", name);
  }

  void StartPull(int ps, PullKind kind, RawCall* call, const common::DenseBuffers* buffers,
                 proto::PullResponse* response, Done done) {
    CountSent(call->request.Length());
    Generic(ps)->UnaryCall(
        &call->context, Method(kind == kPull ? "Pull" : "PushPull"), grpc::StubOptions(),
        &call->request, &call->response,
        [call, buffers, response, done = std::move(done)](grpc::Status status) {
          absl::Status result = rpc::FromGrpcStatus(status);
          if (result.ok()) {
            CountReceived(call->response.Length());
            result = rpc::DecodePullResponse(&call->response, buffers->values, response);
          }
          delete call;
          done(std::move(result));
        });
  }

  grpc::ClientContext* NewContext() const {
    auto* context = new grpc::ClientContext();
    rpc::SetDeadline(context, rpc_timeout_);
    return context;
  }
  // Owns the context until the call completes.
  static std::function<void(grpc::Status)> Finisher(grpc::ClientContext* context,
                                                    const google::protobuf::Message* response,
                                                    Done done) {
    return [context, response, done = std::move(done)](grpc::Status status) {
      delete context;
      if (status.ok()) CountReceived(response->ByteSizeLong());
      done(rpc::FromGrpcStatus(status));
    };
  }

  const std::vector<std::string> addresses_;
  const absl::Duration rpc_timeout_;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
  // Per ps: the dense calls' connections, taken in turn.
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> generic_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>>> next_;
};

}  // namespace

std::unique_ptr<common::PsTransport> MakeGrpcPsTransport(const std::vector<std::string>& addresses,
                                                         const rpc::RpcSettings& settings,
                                                         absl::Duration rpc_timeout) {
  return std::make_unique<GrpcPsTransport>(addresses, settings, rpc_timeout);
}

PsTraffic ProcessPsTraffic() {
  return {sent_bytes.load(std::memory_order_relaxed),
          received_bytes.load(std::memory_order_relaxed)};
}

}  // namespace pst::client
