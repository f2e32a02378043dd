#include "worker/session.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/grpc_coordinator_client.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "models/train_loop.h"

namespace pst::worker {

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Start(
    const TrainerOptions& options) {
  std::unique_ptr<client::CoordinatorClient> coordinator =
      client::MakeGrpcCoordinatorClient(options.coordinator_address, options.rpc);
  client::CoordinatorClient* const raw = coordinator.get();
  std::unique_ptr<WorkerSession> session(new WorkerSession(options, std::move(coordinator)));
  PST_RETURN_IF_ERROR(session->Connect(GrpcConnections(raw, options.rpc)));
  return session;
}

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Start(
    const TrainerOptions& options, const WorkerConnections& connections) {
  std::unique_ptr<WorkerSession> session(new WorkerSession(options, nullptr));
  PST_RETURN_IF_ERROR(session->Connect(connections));
  return session;
}

absl::Status WorkerSession::Connect(const WorkerConnections& connections) {
  PST_ASSIGN_OR_RETURN(link_, ClusterLink::Register(options_, connections, stop_));
  const proto::ClusterState& state = link_->state();
  if (state.plan().dense_size() + state.plan().tables_size() == 0) {
    return absl::FailedPreconditionError(
        "the chief's plan does not list the model's variables (a chief older than this worker?)");
  }
  const std::vector<std::string> dense(state.plan().dense().begin(), state.plan().dense().end());
  PST_ASSIGN_OR_RETURN(
      ps_, client::PsClient::Create(
               state.plan(), dense,
               client::MakeRoutedTransport(
                   connections.ps_transport(link_->ps_addresses(), options_.rpc_timeout),
                   link_->routes()),
               options_.worker_index, options_.incarnation));
  generation_ = state.generation();
  ps_->set_generation(generation_);
  ps_->set_sync(state.training().sync().mode() == proto::SYNC);
  ps_->set_wire_dtype(state.training().wire_dtype());
  ps_->set_topk_ratio(state.training().topk_ratio());
  position_ = std::max<int64_t>(0, link_->start_position());
  shuffle_seed_ = models::WorkerShuffleSeed(state.training(), options_.worker_index);
  spdlog::info(
      "registered with the coordinator at {}: {} worker(s), {} ps, batch {}, {} epoch(s), "
      "starting at data position {}",
      options_.coordinator_address, state.num_workers(), state.ps_addresses_size(),
      state.training().batch_size(), state.training().epochs(), position_);
  link_->Start();
  return absl::OkStatus();
}

WorkerSession::~WorkerSession() {
  if (link_ == nullptr) return;
  link_->StopHeartbeats();
  if (!completed_) {
    const std::string reason = stop_.stopped() ? stop_.reason() : "the training loop ended early";
    link_->ReportDone(false, reason).IgnoreError();
  }
}

absl::StatusOr<WorkerSession::Batch> WorkerSession::Next(int64_t num_examples, bool own_share) {
  const proto::TrainingConfig& training = link_->training();
  const int workers = std::max(1, state().num_workers());
  if (own_share && num_examples < 1) {
    return absl::InvalidArgumentError("this worker's share of the data holds no example");
  }
  if (!own_share && num_examples < workers) {
    return absl::InvalidArgumentError(absl::StrCat("a data set of ", num_examples,
                                                   " example(s) cannot be shared by ", workers,
                                                   " worker(s)"));
  }
  if (num_examples_ != 0 && num_examples != num_examples_) {
    return absl::InvalidArgumentError(absl::StrCat("the data set has ", num_examples,
                                                   " example(s) now, but ", num_examples_,
                                                   " before: a position names other batches"));
  }
  num_examples_ = num_examples;
  // This worker's examples: i % workers == worker_index, or its own share.
  const int64_t shard =
      own_share ? num_examples : (num_examples - options_.worker_index + workers - 1) / workers;
  const int64_t batch = training.batch_size();
  const int64_t per_epoch = (shard + batch - 1) / batch;
  if (handed_out_ && !step_failed_) ++position_;
  handed_out_ = false;
  Batch out;
  for (;;) {
    if (stop_.stopped()) return absl::CancelledError(stop_.reason());
    if (link_->lost().stopped()) return link_->heartbeat_error();
    const CoordinatorView::State v = link_->view().Get();
    if (step_failed_ || Recovering(v)) {
      PST_ASSIGN_OR_RETURN(const bool end, WaitForCluster());
      if (end) {
        out.done = true;
        return out;
      }
      continue;
    }
    if (v.should_stop || position_ >= training.epochs() * per_epoch ||
        models::ReachedMaxSteps(training, global_step_)) {
      PST_ASSIGN_OR_RETURN(const bool ended, Finish());
      if (ended) {
        out.done = true;
        return out;
      }
      continue;
    }
    // At the end of an epoch the chief acts on: hold until it is done.
    if (const int epoch = link_->EpochEndToHold(position_, per_epoch); epoch > 0) {
      link_->AwaitEpochRelease(epoch, v, generation_);
      continue;
    }
    break;
  }
  epoch_ = static_cast<int>(position_ / per_epoch);
  const int64_t first = (position_ - epoch_ * per_epoch) * batch;
  const int64_t count = std::min(batch, shard - first);
  out.examples.resize(count);
  if (own_share) {
    std::iota(out.examples.begin(), out.examples.end(), first);
  } else {
    if (order_epoch_ != epoch_) {
      models::ShuffledOrder(shard, shuffle_seed_, epoch_, &order_);
      order_epoch_ = epoch_;
    }
    for (int64_t k = 0; k < count; ++k) {
      out.examples[k] = order_[first + k] * workers + options_.worker_index;
    }
  }
  out.position = position_;
  out.epoch = epoch_;
  out.refresh = refresh_;
  refresh_ = false;
  handed_out_ = true;
  rows_pushed_ = false;
  step_start_ = absl::Now();
  step_calls_ = absl::ZeroDuration();
  return out;
}

absl::StatusOr<bool> WorkerSession::WaitForCluster() {
  if (!failing_since_.has_value()) failing_since_ = absl::Now();
  const CoordinatorView::State v = link_->AwaitCluster(link_->view().Get(), generation_,
                                                       *failing_since_, absl::Now() + backoff_);
  backoff_ = std::min(2 * backoff_, absl::Seconds(2));
  if (stop_.stopped()) return absl::CancelledError(stop_.reason());
  if (link_->lost().stopped()) return link_->heartbeat_error();
  if (v.should_stop) {
    spdlog::info("the coordinator ended the job while this worker waited");
    completed_ = true;
    return true;
  }
  if (absl::Now() - *failing_since_ > options_.recovery_timeout) {
    return absl::UnavailableError(absl::StrCat("the cluster did not recover within ",
                                               absl::FormatDuration(options_.recovery_timeout),
                                               " (recovery timeout)"));
  }
  if (v.generation != generation_) {
    generation_ = v.generation;
    ps_->set_generation(generation_);
    position_ = v.position;
    link_->progress().Begin(generation_, position_);
    spdlog::info("the ps were restored (generation {}): going on from data position {}",
                 generation_, position_);
  } else {
    spdlog::info("retrying from data position {}", position_);
  }
  step_failed_ = false;
  refresh_ = true;
  return false;
}

absl::StatusOr<bool> WorkerSession::Finish() {
  const proto::StepTimes times = StepTimesProto(times_, ps_->dense_wire_bytes());
  absl::Status reported = link_->ReportDone(true, "finished", &times);
  if (!reported.ok()) {
    spdlog::warn("could not report completion: {}", reported.message());
    step_failed_ = true;  // wait a moment, then report again
    return false;
  }
  link_->set_finished(true);
  spdlog::info("waiting for the chief to end the job");
  const CoordinatorView::State v = link_->AwaitEnd(link_->view().Get(), generation_);
  if (stop_.stopped()) return absl::CancelledError(stop_.reason());
  if (link_->lost().stopped()) return link_->heartbeat_error();
  if (v.phase == proto::PHASE_DONE) {
    completed_ = true;
    return true;
  }
  link_->set_finished(false);
  spdlog::warn(
      "the ps are being restored from a checkpoint after this worker finished: it trains again "
      "from its position there");
  step_failed_ = true;
  return false;
}

absl::StatusOr<bool> WorkerSession::Failed(const absl::Status& status, const char* what) {
  if (!Retryable(status) && !Recovering(link_->view().Get())) return status;
  spdlog::warn("{} at data position {} failed: {}; waiting for the cluster", what, position_,
               status.message());
  step_failed_ = true;
  return false;
}

absl::StatusOr<bool> WorkerSession::Pull(const client::ValueSpans& values) {
  if (step_failed_) return false;
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> version = ps_->Pull(values);
  NoteCall(start);
  if (version.ok()) {
    global_step_ = *version;
    return true;
  }
  if (version.status().code() == absl::StatusCode::kInvalidArgument) return version.status();
  return Failed(version.status(), "pull");
}

absl::StatusOr<bool> WorkerSession::PushPull(const client::GradientSpans& grads,
                                             const client::ValueSpans& values, int64_t examples,
                                             float loss) {
  if (step_failed_) return false;
  const bool sync = link_->training().sync().mode() == proto::SYNC;
  // SYNC tags a push with the version it was computed from; the other
  // modes with the data position.
  const int64_t tag = sync ? global_step_ : position_;
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> version = ps_->PushPull(tag, global_step_, grads, values, position_);
  NoteCall(start);
  if (!version.ok()) {
    if (version.status().code() == absl::StatusCode::kInvalidArgument) return version.status();
    refresh_ = true;  // the answers may have overwritten part of `values`
    return Failed(version.status(), "step");
  }
  global_step_ = *version;
  // The step is done: its time goes to the figures.
  const absl::Duration took = absl::Now() - step_start_;
  ++times_.steps;
  times_.communication += step_calls_;
  times_.waited += step_calls_;
  times_.compute += std::max(absl::ZeroDuration(), took - step_calls_);
  link_->progress().Step(examples, loss, epoch_, global_step_, position_ + 1);
  failing_since_.reset();
  backoff_ = absl::Milliseconds(100);
  return true;
}

absl::StatusOr<bool> WorkerSession::PullRows(const std::string& table,
                                             std::span<const int64_t> ids,
                                             std::span<float> rows) {
  if (step_failed_) return false;
  PST_RETURN_IF_ERROR(ps_->TableDim(table).status());  // unknown: not worth a retry
  const client::PsClient::TableIds request[] = {{table, ids}};
  const absl::Time start = absl::Now();
  absl::Status status = ps_->PullRows(request, client::ValueSpans{rows});
  NoteCall(start);
  if (status.ok()) return true;
  if (status.code() == absl::StatusCode::kInvalidArgument) return status;
  return Failed(status, "row pull");
}

absl::StatusOr<bool> WorkerSession::PushRows(std::span<const client::PsClient::TableIds> tables,
                                             const client::GradientSpans& grads) {
  if (step_failed_) return false;
  if (rows_pushed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a second row push at data position ", position_,
        ": the ps would take it for a retry and drop it; push every table's rows of a batch in "
        "one call"));
  }
  for (const client::PsClient::TableIds& t : tables) {
    PST_RETURN_IF_ERROR(ps_->TableDim(t.table).status());  // unknown: not worth a retry
  }
  // Tagged as PushPull tags the batch's dense push.
  const bool sync = link_->training().sync().mode() == proto::SYNC;
  const absl::Time start = absl::Now();
  absl::Status status = ps_->PushRows(sync ? global_step_ : position_, tables, grads);
  NoteCall(start);
  if (status.code() == absl::StatusCode::kInvalidArgument) return status;
  rows_pushed_ = true;
  if (status.ok()) return true;
  return Failed(status, "row push");
}

absl::StatusOr<bool> WorkerSession::PushRows(const std::string& table,
                                             std::span<const int64_t> ids,
                                             std::span<const float> grads) {
  const client::PsClient::TableIds request[] = {{table, ids}};
  return PushRows(request, client::GradientSpans{grads});
}

}  // namespace pst::worker
