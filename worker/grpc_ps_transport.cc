#include "worker/grpc_ps_transport.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::worker {
namespace {

class GrpcPsTransport final : public common::PsTransport {
 public:
  GrpcPsTransport(const std::vector<std::string>& addresses, absl::Duration rpc_timeout)
      : addresses_(addresses), rpc_timeout_(rpc_timeout) {
    for (const std::string& address : addresses) {
      stubs_.push_back(proto::ParameterServer::NewStub(common::MakeChannel(address)));
    }
  }

  int num_ps() const override { return static_cast<int>(stubs_.size()); }

  void Pull(int ps, const proto::PullRequest* request, proto::PullResponse* response,
            Done done) override {
    grpc::ClientContext* context = NewContext();
    stubs_[ps]->async()->Pull(context, request, response, Finisher(context, std::move(done)));
  }
  void Push(int ps, const proto::PushRequest* request, proto::PushResponse* response,
            Done done) override {
    grpc::ClientContext* context = NewContext();
    stubs_[ps]->async()->Push(context, request, response, Finisher(context, std::move(done)));
  }
  void PushPull(int ps, const proto::PushPullRequest* request, proto::PullResponse* response,
                Done done) override {
    grpc::ClientContext* context = NewContext();
    stubs_[ps]->async()->PushPull(context, request, response, Finisher(context, std::move(done)));
  }
  void PullRows(int ps, const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                Done done) override {
    grpc::ClientContext* context = NewContext();
    stubs_[ps]->async()->PullRows(context, request, response, Finisher(context, std::move(done)));
  }
  void PushRows(int ps, const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                Done done) override {
    grpc::ClientContext* context = NewContext();
    stubs_[ps]->async()->PushRows(context, request, response, Finisher(context, std::move(done)));
  }
  std::string Describe(int ps) const override {
    return absl::StrCat("ps ", ps, " at ", addresses_[ps]);
  }

 private:
  grpc::ClientContext* NewContext() const {
    auto* context = new grpc::ClientContext();
    common::SetDeadline(context, rpc_timeout_);
    return context;
  }
  // Owns the context until the call completes.
  static std::function<void(grpc::Status)> Finisher(grpc::ClientContext* context, Done done) {
    return [context, done = std::move(done)](grpc::Status status) {
      delete context;
      done(common::FromGrpcStatus(status));
    };
  }

  const std::vector<std::string> addresses_;
  const absl::Duration rpc_timeout_;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
};

}  // namespace

std::unique_ptr<common::PsTransport> MakeGrpcPsTransport(const std::vector<std::string>& addresses,
                                                         absl::Duration rpc_timeout) {
  return std::make_unique<GrpcPsTransport>(addresses, rpc_timeout);
}

}  // namespace pst::worker
