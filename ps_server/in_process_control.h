// A PsControl whose ps are an InProcessPs in this process: each call runs
// the ps's own control logic (PsNode) on the caller's thread and waits for
// it, so a save or restore has finished, files and all, when its call
// returns. Timeouts are not needed (nothing waits on a network) and are
// ignored; a ps that is down fails every call Unavailable at once.
//
// For tests of the recovery protocol, the control can also fail calls the
// way a real cluster does, at the moment a test chooses:
//  - an interceptor sees every call before it reaches its ps, and may fail
//    it or change the ps (restart it, take it down) first;
//  - Disconnect() fails every later call, as a crashed chief's calls reach
//    no one.
//
// Thread-safe.
#ifndef PST_PS_SERVER_IN_PROCESS_CONTROL_H_
#define PST_PS_SERVER_IN_PROCESS_CONTROL_H_

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/ps_control.h"
#include "google/protobuf/message.h"
#include "ps_server/in_process_ps.h"

namespace pst::ps {

class InProcessPsControl final : public common::PsControl {
 public:
  explicit InProcessPsControl(std::shared_ptr<InProcessPs> ps);

  // Runs before every call with the ps it is for and its request; a non-OK
  // answer fails the call with it, and the call never reaches the ps.
  // Runs on the caller's thread, without locks held.
  using Interceptor = std::function<absl::Status(int ps, const google::protobuf::Message& request)>;
  void SetInterceptor(Interceptor interceptor);
  // Every call from now on fails Unavailable.
  void Disconnect();

  int num_ps() const override { return ps_->num_ps(); }
  absl::StatusOr<proto::CreateVariablesResponse> CreateVariables(
      int ps, const proto::CreateVariablesRequest& request, absl::Duration timeout) override;
  absl::StatusOr<proto::HealthResponse> Health(int ps, const proto::HealthRequest& request,
                                               absl::Duration timeout) override;
  absl::StatusOr<proto::MembershipResponse> SetMembership(int ps,
                                                          const proto::MembershipRequest& request,
                                                          absl::Duration timeout) override;
  absl::StatusOr<proto::RolesResponse> SetRoles(int ps, const proto::RolesRequest& request,
                                                absl::Duration timeout) override;
  absl::StatusOr<proto::SaveResponse> Save(int ps, const proto::SaveRequest& request,
                                           absl::Duration timeout) override;
  absl::StatusOr<proto::RestoreResponse> Restore(int ps, const proto::RestoreRequest& request,
                                                 absl::Duration timeout) override;
  absl::Status Shutdown(int ps, const proto::ShutdownRequest& request,
                        absl::Duration timeout) override;

 private:
  // The ps a call reaches, after the interceptor and the connection.
  absl::StatusOr<InProcessPs::Server*> Reach(int ps, const google::protobuf::Message& request);

  const std::shared_ptr<InProcessPs> ps_;
  absl::Mutex mu_;
  Interceptor interceptor_ ABSL_GUARDED_BY(mu_);
  bool disconnected_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_IN_PROCESS_CONTROL_H_
