#include "worker/trainer.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/grpc_ps_transport.h"
#include "worker/mnist_reader.h"
#include "worker/model_spec.h"
#include "worker/ps_client.h"
#include "worker/training_loops.h"

namespace pst::worker {
namespace {

// Progress shared between the training loop and the heartbeat thread.
class Progress {
 public:
  void Step(int64_t examples, float loss, int epoch, int64_t version) {
    absl::MutexLock lock(&mu_);
    version_ = std::max(version_, version);
    ++steps_;
    examples_ += examples;
    loss_sum_ += loss;
    ++loss_count_;
    epoch_ = epoch;
  }
  // Fills `request` and resets the running loss.
  void Report(proto::HeartbeatRequest* request) {
    absl::MutexLock lock(&mu_);
    request->set_steps(steps_);
    request->set_version(version_);
    request->set_examples(examples_);
    request->set_epoch(epoch_);
    if (loss_count_ > 0) request->set_loss(static_cast<float>(loss_sum_ / loss_count_));
    loss_sum_ = 0;
    loss_count_ = 0;
  }

 private:
  absl::Mutex mu_;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t examples_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int loss_count_ ABSL_GUARDED_BY(mu_) = 0;
  int epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// Registers with the coordinator, retrying while it is not up yet.
absl::StatusOr<proto::ClusterState> Register(proto::Coordinator::Stub* coordinator,
                                             const TrainerOptions& options,
                                             const common::StopSignal& stop) {
  const absl::Time deadline = absl::Now() + options.startup_timeout;
  proto::RegisterRequest request;
  request.set_worker_index(options.worker_index);
  request.set_incarnation(options.incarnation);
  absl::Duration backoff = absl::Milliseconds(50);
  for (;; backoff = std::min(2 * backoff, absl::Seconds(1))) {
    grpc::ClientContext context;
    common::SetDeadline(&context, absl::Seconds(1), /*wait_for_ready=*/true);
    proto::RegisterResponse response;
    grpc::Status status = coordinator->Register(&context, request, &response);
    if (status.ok()) return response.state();
    const bool retry = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!retry) return common::FromGrpcStatus(status);
    // The coordinator may be up but still initializing: wait a little.
    if (stop.WaitFor(backoff)) return absl::CancelledError("stopped before registering");
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the coordinator at ", options.coordinator_address,
                       " did not answer within --startup_timeout_s: ", status.error_message()));
    }
  }
}

}  // namespace

absl::Status RunWorker(const TrainerOptions& options, const common::StopSignal& stop) {
  auto coordinator = proto::Coordinator::NewStub(common::MakeChannel(options.coordinator_address));
  PST_ASSIGN_OR_RETURN(proto::ClusterState state, Register(coordinator.get(), options, stop));
  const proto::TrainingConfig& training = state.training();
  spdlog::info(
      "registered with the coordinator at {}: {} worker(s), {} ps, model {}, batch {}, "
      "{} epoch(s)",
      options.coordinator_address, state.num_workers(), state.ps_addresses_size(), training.model(),
      training.batch_size(), training.epochs());

  PST_ASSIGN_OR_RETURN(std::vector<ModelVariable> variables, ModelVariables(training));
  PST_RETURN_IF_ERROR(CheckPlanMatches(state.plan(), variables));
  const std::vector<std::string> ps_addresses(state.ps_addresses().begin(),
                                              state.ps_addresses().end());
  PST_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps,
                       PsClient::Create(state.plan(), DenseNames(variables),
                                        MakeGrpcPsTransport(ps_addresses, options.rpc_timeout),
                                        options.worker_index, options.incarnation));

  // This worker's shard of the data.
  Dataset images;
  CtrDataset clicks;
  if (training.model() == "mlp") {
    PST_ASSIGN_OR_RETURN(Dataset all, LoadFashionMnist(options.data_dir, Split::kTrain));
    images = ShardDataset(all, options.worker_index, state.num_workers());
    spdlog::info("training on {} example(s) of {}", images.num_examples, options.data_dir);
  } else {
    PST_ASSIGN_OR_RETURN(clicks, LoadCtrSplit(training, /*held_out=*/false, options.worker_index,
                                              state.num_workers()));
    spdlog::info("training on {} example(s) of {}", clicks.size, training.data());
  }
  if (images.num_examples == 0 && clicks.size == 0) {
    return absl::FailedPreconditionError("this worker's shard of the training data is empty");
  }

  // Heartbeats: progress out, "should stop" back.
  Progress progress;
  common::StopSignal told_to_stop;
  absl::Notification loop_done;
  absl::Status heartbeat_error;
  std::thread heartbeat([&] {
    absl::Time last_ok = absl::Now();
    while (!loop_done.WaitForNotificationWithTimeout(options.heartbeat_interval)) {
      proto::HeartbeatRequest request;
      request.set_worker_index(options.worker_index);
      request.set_incarnation(options.incarnation);
      progress.Report(&request);
      grpc::ClientContext context;
      common::SetDeadline(&context, options.heartbeat_interval + absl::Seconds(1));
      proto::HeartbeatResponse response;
      grpc::Status status = coordinator->Heartbeat(&context, request, &response);
      if (status.ok()) {
        last_ok = absl::Now();
        if (response.should_stop()) told_to_stop.Stop("the coordinator says stop");
      } else if (absl::Now() - last_ok > options.peer_timeout) {
        heartbeat_error = absl::UnavailableError(absl::StrCat(
            "lost the coordinator at ", options.coordinator_address, ": ", status.error_message()));
        told_to_stop.Stop("lost the coordinator");
        return;
      }
    }
  });

  LoopControl control;
  control.should_stop = [&] { return stop.stopped() || told_to_stop.stopped(); };
  control.step_delay = options.step_delay;
  control.on_step = [&](int64_t examples, float loss, int epoch, int64_t version) {
    progress.Step(examples, loss, epoch, version);
  };
  const uint64_t shuffle_seed = training.seed() ^ (uint64_t(options.worker_index) << 32);
  absl::StatusOr<int64_t> global_step =
      training.model() == "mlp" ? TrainMlp(training, images, shuffle_seed, ps.get(), control)
                                : TrainWideDeep(training, clicks, shuffle_seed, ps.get(), control);
  absl::Status status = global_step.status();
  bool completed = status.ok();
  if (stop.stopped()) {
    completed = false;
    spdlog::info("stopping early: {}", stop.reason());
  }
  loop_done.Notify();
  heartbeat.join();
  if (status.ok() && !heartbeat_error.ok()) status = heartbeat_error;
  if (!status.ok()) completed = false;

  // Tell the coordinator we are done (best effort when it is gone).
  proto::WorkerDoneRequest done;
  done.mutable_final_progress()->set_worker_index(options.worker_index);
  done.mutable_final_progress()->set_incarnation(options.incarnation);
  progress.Report(done.mutable_final_progress());
  done.set_completed(completed);
  done.set_reason(status.ok() ? (completed ? "finished" : stop.reason())
                              : std::string(status.message()));
  grpc::ClientContext context;
  common::SetDeadline(&context, absl::Seconds(5));
  proto::WorkerDoneResponse done_response;
  grpc::Status reported = coordinator->WorkerDone(&context, done, &done_response);
  if (!reported.ok() && status.ok() && completed) {
    status = absl::UnavailableError(
        absl::StrCat("could not report completion to the coordinator: ", reported.error_message()));
  }
  spdlog::info("worker finished: {} step(s), global step {}", done.final_progress().steps(),
               global_step.ok() ? *global_step : -1);
  return status;
}

}  // namespace pst::worker
