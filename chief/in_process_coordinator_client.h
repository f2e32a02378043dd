// A CoordinatorClient that calls a Coordinator in this process, stamping
// each call with the time of an injected clock (the chief's, in a test that
// drives it). Timeouts are not needed and are ignored.
//
// A test can take the coordinator away and bring another: Connect(nullptr)
// makes every call fail Unavailable, as while a chief is down; Connect(c)
// reaches a restarted chief's coordinator `c`.
//
// Thread-safe.
#ifndef PST_CHIEF_IN_PROCESS_COORDINATOR_CLIENT_H_
#define PST_CHIEF_IN_PROCESS_COORDINATOR_CLIENT_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "chief/coordinator.h"
#include "client/coordinator_client.h"
#include "common/clock.h"

namespace pst::chief {

class InProcessCoordinatorClient final : public client::CoordinatorClient {
 public:
  // Neither is owned; `clock` must outlive this, `coordinator` (may be
  // null) every call made until the next Connect.
  InProcessCoordinatorClient(Coordinator* coordinator, common::Clock* clock);

  // Waits for calls in flight to the coordinator connected before.
  void Connect(Coordinator* coordinator);

  absl::StatusOr<proto::RegisterResponse> Register(const proto::RegisterRequest& request,
                                                   absl::Duration timeout) override;
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& request,
                                                     absl::Duration timeout) override;
  absl::Status WorkerDone(const proto::WorkerDoneRequest& request, absl::Duration timeout) override;
  absl::StatusOr<proto::ClaimWorkerIndexResponse> ClaimWorkerIndex(
      const proto::ClaimWorkerIndexRequest& request, absl::Duration timeout) override;

 private:
  common::Clock* const clock_;
  absl::Mutex mu_;  // held shared by calls, exclusively by Connect
  Coordinator* coordinator_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::chief

#endif  // PST_CHIEF_IN_PROCESS_COORDINATOR_CLIENT_H_
