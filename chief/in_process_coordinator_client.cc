#include "chief/in_process_coordinator_client.h"

namespace pst::chief {
namespace {

absl::Status Down() { return absl::UnavailableError("the in-process coordinator is down"); }

}  // namespace

InProcessCoordinatorClient::InProcessCoordinatorClient(Coordinator* coordinator,
                                                       common::Clock* clock)
    : clock_(clock), coordinator_(coordinator) {}

void InProcessCoordinatorClient::Connect(Coordinator* coordinator) {
  absl::WriterMutexLock lock(&mu_);
  coordinator_ = coordinator;
}

absl::StatusOr<proto::RegisterResponse> InProcessCoordinatorClient::Register(
    const proto::RegisterRequest& request, absl::Duration) {
  absl::ReaderMutexLock lock(&mu_);
  if (coordinator_ == nullptr) return Down();
  return coordinator_->Register(request, clock_->Now());
}

absl::StatusOr<proto::HeartbeatResponse> InProcessCoordinatorClient::Heartbeat(
    const proto::HeartbeatRequest& request, absl::Duration) {
  absl::ReaderMutexLock lock(&mu_);
  if (coordinator_ == nullptr) return Down();
  return coordinator_->Heartbeat(request, clock_->Now());
}

absl::Status InProcessCoordinatorClient::WorkerDone(const proto::WorkerDoneRequest& request,
                                                    absl::Duration) {
  absl::ReaderMutexLock lock(&mu_);
  if (coordinator_ == nullptr) return Down();
  return coordinator_->WorkerDone(request, clock_->Now());
}

absl::StatusOr<proto::ClaimWorkerIndexResponse> InProcessCoordinatorClient::ClaimWorkerIndex(
    const proto::ClaimWorkerIndexRequest& request, absl::Duration) {
  absl::ReaderMutexLock lock(&mu_);
  if (coordinator_ == nullptr) return Down();
  absl::StatusOr<int> index = coordinator_->ClaimWorkerIndex(request.claimant());
  if (!index.ok()) return index.status();
  proto::ClaimWorkerIndexResponse response;
  response.set_index(*index);
  response.set_num_workers(coordinator_->State().num_workers());
  return response;
}

}  // namespace pst::chief
