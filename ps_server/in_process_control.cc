#include "ps_server/in_process_control.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"

namespace pst::ps {
namespace {

// Runs an asynchronous PsNode call and waits for its answer.
template <typename Request, typename Response>
absl::StatusOr<Response> Await(void (PsNode::*call)(const Request*, Response*, PsNode::Done),
                               PsNode* node, const Request& request) {
  Response response;
  absl::Status status;
  absl::Notification done;
  (node->*call)(&request, &response, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) return status;
  return response;
}

}  // namespace

InProcessPsControl::InProcessPsControl(std::shared_ptr<InProcessPs> ps) : ps_(std::move(ps)) {}

void InProcessPsControl::SetInterceptor(Interceptor interceptor) {
  absl::MutexLock lock(&mu_);
  interceptor_ = std::move(interceptor);
}

void InProcessPsControl::Disconnect() {
  absl::MutexLock lock(&mu_);
  disconnected_ = true;
}

absl::StatusOr<InProcessPs::Server*> InProcessPsControl::Reach(
    int ps, const google::protobuf::Message& request) {
  Interceptor interceptor;
  {
    absl::MutexLock lock(&mu_);
    if (disconnected_) {
      return absl::UnavailableError(absl::StrCat("in-process ps ", ps, ": disconnected"));
    }
    interceptor = interceptor_;
  }
  if (interceptor) PST_RETURN_IF_ERROR(interceptor(ps, request));
  return ps_->Get(ps);
}

absl::StatusOr<proto::CreateVariablesResponse> InProcessPsControl::CreateVariables(
    int ps, const proto::CreateVariablesRequest& request, absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  return Await(&PsNode::CreateVariables, &server->node, request);
}

absl::StatusOr<proto::HealthResponse> InProcessPsControl::Health(
    int ps, const proto::HealthRequest& request, absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  proto::HealthResponse response;
  server->node.Health(request, &response);
  return response;
}

absl::StatusOr<proto::MembershipResponse> InProcessPsControl::SetMembership(
    int ps, const proto::MembershipRequest& request, absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  return Await(&PsNode::SetMembership, &server->node, request);
}

absl::StatusOr<proto::RolesResponse> InProcessPsControl::SetRoles(
    int ps, const proto::RolesRequest& request, absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  return Await(&PsNode::SetRoles, &server->node, request);
}

absl::StatusOr<proto::SaveResponse> InProcessPsControl::Save(int ps,
                                                             const proto::SaveRequest& request,
                                                             absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  return Await(&PsNode::Save, &server->node, request);
}

absl::StatusOr<proto::RestoreResponse> InProcessPsControl::Restore(
    int ps, const proto::RestoreRequest& request, absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  return Await(&PsNode::Restore, &server->node, request);
}

absl::Status InProcessPsControl::Shutdown(int ps, const proto::ShutdownRequest& request,
                                          absl::Duration) {
  PST_ASSIGN_OR_RETURN(InProcessPs::Server * server, Reach(ps, request));
  server->shutdown.Stop(absl::StrCat("shutdown requested: ", request.reason()));
  return absl::OkStatus();
}

}  // namespace pst::ps
