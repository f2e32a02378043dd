#include "worker/trainer.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proto/pstrain.grpc.pb.h"
#include "worker/mlp.h"
#include "worker/mnist_reader.h"
#include "worker/model_spec.h"
#include "worker/ps_client.h"

namespace pst::worker {
namespace {

// Progress shared between the training loop and the heartbeat thread.
class Progress {
 public:
  void Step(int64_t examples, float loss, int epoch) {
    absl::MutexLock lock(&mu_);
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
    request->set_examples(examples_);
    request->set_epoch(epoch_);
    if (loss_count_ > 0) request->set_loss(static_cast<float>(loss_sum_ / loss_count_));
    loss_sum_ = 0;
    loss_count_ = 0;
  }

 private:
  absl::Mutex mu_;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
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
  spdlog::info("registered with the coordinator at {}: {} worker(s), {} ps, batch {}, {} epoch(s)",
               options.coordinator_address, state.num_workers(), state.ps_addresses_size(),
               training.batch_size(), training.epochs());

  PST_ASSIGN_OR_RETURN(MlpConfig mlp_config, MlpConfigFor(training));
  PST_ASSIGN_OR_RETURN(std::vector<proto::VariableSpec> specs, ModelVariables(training));
  PST_RETURN_IF_ERROR(CheckPlanMatches(state.plan(), specs));
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name());

  PST_ASSIGN_OR_RETURN(Dataset all, LoadFashionMnist(options.data_dir, Split::kTrain));
  const Dataset data = ShardDataset(all, options.worker_index, state.num_workers());
  all = Dataset();
  if (data.num_examples == 0) {
    return absl::FailedPreconditionError("this worker's shard of the training data is empty");
  }
  spdlog::info("training on {} example(s) of {}", data.num_examples, options.data_dir);

  PST_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps,
                       PsClient::Create(state, names, options.worker_index, options.incarnation,
                                        options.rpc_timeout));
  Values params, grads;
  PST_ASSIGN_OR_RETURN(int64_t global_step, ps->Pull(&params));

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

  Mlp model(mlp_config);
  const int batch = training.batch_size();
  const int dim = data.dim;
  std::vector<int> order(data.num_examples);
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> x(static_cast<size_t>(batch) * dim);
  std::vector<int32_t> y(batch);
  int64_t step = 0;
  absl::Status status;
  bool completed = true;
  for (int epoch = 0; epoch < training.epochs() && status.ok(); ++epoch) {
    std::mt19937_64 rng(training.seed() ^ (uint64_t(options.worker_index) << 32) ^ epoch);
    std::shuffle(order.begin(), order.end(), rng);
    for (int start = 0; start < data.num_examples; start += batch) {
      if (stop.stopped() || told_to_stop.stopped()) break;
      if (training.max_steps() > 0 && global_step >= training.max_steps()) break;
      const int n = std::min(batch, data.num_examples - start);
      for (int k = 0; k < n; ++k) {
        const int e = order[start + k];
        std::copy_n(&data.features[static_cast<size_t>(e) * dim], dim,
                    &x[static_cast<size_t>(k) * dim]);
        y[k] = data.labels[e];
      }
      absl::StatusOr<float> loss = model.LossAndGradients(params, x.data(), y.data(), n, &grads);
      if (!loss.ok()) {
        status = loss.status();
        break;
      }
      absl::StatusOr<int64_t> version = ps->PushPull(step, grads, &params);
      if (!version.ok()) {
        status = version.status();
        break;
      }
      global_step = *version;
      ++step;
      progress.Step(n, *loss, epoch);
    }
    if (stop.stopped() || told_to_stop.stopped()) break;
    if (training.max_steps() > 0 && global_step >= training.max_steps()) break;
  }
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
  spdlog::info("worker finished: {} step(s), global step {}", step, global_step);
  return status;
}

}  // namespace pst::worker
