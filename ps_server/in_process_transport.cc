#include "ps_server/in_process_transport.h"

#include "absl/strings/str_cat.h"

namespace pst::ps {

InProcessPsTransport::InProcessPsTransport(int num_ps)
    : ps_(std::make_shared<InProcessPs>(num_ps)) {}

InProcessPsTransport::InProcessPsTransport(std::shared_ptr<InProcessPs> ps) : ps_(std::move(ps)) {}

void InProcessPsTransport::Pull(int ps, const proto::PullRequest* request,
                                proto::PullResponse* response, Done done) {
  absl::StatusOr<InProcessPs::Server*> server = ps_->Get(ps);
  if (!server.ok()) return done(server.status());
  (*server)
      ->node.StoreFor(request->names().empty() ? "" : request->names(0))
      ->PullWhenReady(request, response, std::move(done));
}

void InProcessPsTransport::Push(int ps, const proto::PushRequest* request,
                                proto::PushResponse* response, Done done) {
  absl::StatusOr<InProcessPs::Server*> server = ps_->Get(ps);
  if (!server.ok()) return done(server.status());
  (*server)->node.Push(request, nullptr, response, std::move(done));
}

void InProcessPsTransport::PushPull(int ps, const proto::PushPullRequest* request,
                                    proto::PullResponse* response, Done done) {
  absl::StatusOr<InProcessPs::Server*> server = ps_->Get(ps);
  if (!server.ok()) return done(server.status());
  (*server)->node.PushPull(request, nullptr, response, std::move(done));
}

void InProcessPsTransport::PullRows(int ps, const proto::PullRowsRequest* request,
                                    proto::PullRowsResponse* response, Done done) {
  absl::StatusOr<InProcessPs::Server*> server = ps_->Get(ps);
  if (!server.ok()) return done(server.status());
  (*server)->node.PullRows(request, response, std::move(done));
}

void InProcessPsTransport::PushRows(int ps, const proto::PushRowsRequest* request,
                                    proto::PushRowsResponse* response, Done done) {
  absl::StatusOr<InProcessPs::Server*> server = ps_->Get(ps);
  if (!server.ok()) return done(server.status());
  (*server)->node.PushRows(request, response, std::move(done));
}

std::string InProcessPsTransport::Describe(int ps) const {
  return absl::StrCat("in-process ps ", ps);
}

}  // namespace pst::ps
