#include "ps_server/in_process_transport.h"

#include "absl/strings/str_cat.h"

namespace pst::ps {

InProcessPsTransport::InProcessPsTransport(int num_ps) {
  for (int i = 0; i < num_ps; ++i) stores_.push_back(std::make_unique<VariableStore>());
}

void InProcessPsTransport::Pull(int ps, const proto::PullRequest* request,
                                proto::PullResponse* response, Done done) {
  stores_[ps]->PullWhenReady(request, response, std::move(done));
}

void InProcessPsTransport::Push(int ps, const proto::PushRequest* request,
                                proto::PushResponse* response, Done done) {
  done(stores_[ps]->Push(*request, response));
}

void InProcessPsTransport::PushPull(int ps, const proto::PushPullRequest* request,
                                    proto::PullResponse* response, Done done) {
  stores_[ps]->PushPullWhenReady(request, response, std::move(done));
}

void InProcessPsTransport::PullRows(int ps, const proto::PullRowsRequest* request,
                                    proto::PullRowsResponse* response, Done done) {
  done(stores_[ps]->PullRows(*request, response));
}

void InProcessPsTransport::PushRows(int ps, const proto::PushRowsRequest* request,
                                    proto::PushRowsResponse* response, Done done) {
  done(stores_[ps]->PushRows(*request, response));
}

std::string InProcessPsTransport::Describe(int ps) const {
  return absl::StrCat("in-process ps ", ps);
}

}  // namespace pst::ps
