#include "evaluator/evaluator_session.h"

#include <cmath>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pst::evaluator {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<EvaluatorSession>> EvaluatorSession::Create(
    EvaluatorOptions options, std::unique_ptr<ChiefLink> chief) {
  if (options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "an evaluator needs --checkpoint_dir: the directory the chief saves checkpoints in");
  }
  if (options.index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("evaluator index ", options.index, " < 0"));
  }
  std::unique_ptr<EvaluatorSession> session(
      new EvaluatorSession(std::move(options), std::move(chief)));
  if (!session->options_.summary_dir.empty()) {
    const std::string dir = (fs::path(session->options_.summary_dir) / "eval").string();
    absl::StatusOr<std::unique_ptr<common::EventWriter>> events = common::EventWriter::Open(dir);
    if (events.ok()) {
      session->events_ = *std::move(events);
      spdlog::info("TensorBoard summaries in {}", session->events_->path());
    } else {
      spdlog::warn("no TensorBoard summaries: {}", events.status().message());
    }
  }
  return session;
}

EvaluatorSession::EvaluatorSession(EvaluatorOptions options, std::unique_ptr<ChiefLink> chief)
    : options_(std::move(options)),
      chief_(std::move(chief)),
      watcher_(options_.checkpoint_dir),
      best_(options_.checkpoint_dir, options_.best_metric, options_.best_mode),
      chief_answered_(absl::Now()) {}

absl::Status EvaluatorSession::Poll() {
  absl::StatusOr<proto::ClusterState> state = chief_->GetState(options_.rpc_timeout);
  const absl::Time now = absl::Now();
  if (state.ok()) {
    phase_ = state->phase();
    final_step_ = state->final_checkpoint_step();
    chief_answered_ = now;
    // A restarted evaluator: the chief has its reports up to some step.
    const auto reported = state->evaluated_steps().find(options_.index);
    if (!resumed_ && reported != state->evaluated_steps().end() &&
        reported->second > watcher_.last_step()) {
      spdlog::info(
          "the chief has this evaluator's reports through step {}: going on after that "
          "checkpoint",
          reported->second);
      watcher_.SkipThrough(reported->second);
    }
    resumed_ = true;
    return absl::OkStatus();
  }
  if (now - chief_answered_ > options_.chief_timeout) {
    return absl::UnavailableError(
        absl::StrCat("the chief has not answered for ", absl::FormatDuration(now - chief_answered_),
                     " (--recovery_timeout_s): ", state.status().message()));
  }
  return absl::OkStatus();
}

bool EvaluatorSession::Finished() const {
  return phase_ == proto::PHASE_DONE || (final_step_ > 0 && watcher_.last_step() >= final_step_);
}

absl::StatusOr<std::optional<FoundCheckpoint>> EvaluatorSession::Next(
    const common::StopSignal& stop) {
  for (;;) {
    if (stop.stopped()) return absl::CancelledError(stop.reason());
    bool over = false;
    absl::StatusOr<std::optional<FoundCheckpoint>> found = Look(&over);
    if (!found.ok() || found->has_value() || over) return found;
    if (stop.WaitFor(options_.poll_interval)) return absl::CancelledError(stop.reason());
  }
}

absl::StatusOr<std::optional<FoundCheckpoint>> EvaluatorSession::Look(bool* over) {
  *over = false;
  if (absl::Status polled = Poll(); !polled.ok()) {
    GiveUp(polled);
    return polled;
  }
  for (;;) {
    absl::StatusOr<std::optional<FoundCheckpoint>> found = watcher_.Next();
    if (!found.ok()) {
      const bool job_over = phase_ == proto::PHASE_DONE || final_step_ > 0;
      if (found.status().code() != absl::StatusCode::kNotFound || job_over) {
        absl::Status error = found.status();
        if (error.code() == absl::StatusCode::kNotFound) {
          error = absl::NotFoundError(
              absl::StrCat(error.message(), ", and the job has saved its final checkpoint: is ",
                           "--checkpoint_dir the directory the chief and the ps save to?"));
        }
        GiveUp(error);
        return error;
      }
      if (!told_missing_) {
        spdlog::info("{} (yet): waiting for the job's first checkpoint", found.status().message());
        told_missing_ = true;
      }
      return std::optional<FoundCheckpoint>();
    }
    if (!found->has_value()) {
      if (Finished()) {
        spdlog::info("the job is over: {} checkpoint(s) evaluated", evaluated_);
        *over = true;
      }
      return found;
    }
    FoundCheckpoint& checkpoint = **found;
    if (checkpoint.problem.ok()) return found;
    std::error_code ec;
    if (!fs::exists(checkpoint.path, ec)) {
      spdlog::warn("{} was removed (--keep_checkpoints) before it could be evaluated",
                   checkpoint.path);
    } else {
      ReportFailure(checkpoint, checkpoint.problem);
    }
  }
}

absl::StatusOr<bool> EvaluatorSession::Report(const FoundCheckpoint& checkpoint,
                                              const std::map<std::string, double>& metrics) {
  std::vector<std::pair<std::string, float>> scalars;
  std::string line;
  for (const auto& [name, value] : metrics) {
    if (name.empty() || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("evaluation of ", checkpoint.name, ": metric '", name, "' = ", value,
                       name.empty() ? " has no name" : " is not a finite number"));
    }
    scalars.emplace_back(absl::StrCat("eval/", name), static_cast<float>(value));
    absl::StrAppend(&line, line.empty() ? "" : ", ", name, " ", value);
  }
  ++evaluated_;
  const int epochs = checkpoint.manifest.epochs_completed();
  if (events_ != nullptr) {
    absl::Status written = events_->AddScalars(checkpoint.step, scalars);
    if (written.ok()) written = events_->Flush();
    if (!written.ok()) spdlog::warn("TensorBoard summary not written: {}", written.message());
  }
  // best/ that cannot be replaced (a full disk) loses no evaluation: the
  // report still goes out, not marked best.
  absl::StatusOr<bool> offered = best_.Offer(checkpoint.path, checkpoint.step, metrics);
  if (!offered.ok()) spdlog::error("best checkpoint not kept: {}", offered.status().message());
  const bool best = offered.value_or(false);
  proto::EvaluationReport report;
  report.set_evaluator_index(options_.index);
  report.set_checkpoint(checkpoint.name);
  report.set_global_step(checkpoint.step);
  report.set_epochs_completed(epochs);
  for (const auto& [name, value] : metrics) (*report.mutable_metrics())[name] = value;
  report.set_best(best);
  Send(report);
  // Logged once reported: a restarted evaluator goes on after it.
  spdlog::info("evaluated {} (step {}, {} epoch(s) completed): {}", checkpoint.name,
               checkpoint.step, epochs, line.empty() ? "no metrics" : line);
  return best;
}

void EvaluatorSession::ReportFailure(const FoundCheckpoint& checkpoint, const absl::Status& error) {
  spdlog::error("checkpoint {} not evaluated: {}", checkpoint.path, error.message());
  proto::EvaluationReport report;
  report.set_evaluator_index(options_.index);
  report.set_checkpoint(checkpoint.name);
  report.set_global_step(checkpoint.step);
  report.set_error(std::string(error.message()));
  Send(report);
}

void EvaluatorSession::GiveUp(const absl::Status& why) {
  spdlog::error("evaluator {} gives up: {}", options_.index, why.message());
  proto::EvaluationReport report;
  report.set_evaluator_index(options_.index);
  report.set_error(std::string(why.message()));
  report.set_fatal(true);
  Send(report);
}

void EvaluatorSession::Send(const proto::EvaluationReport& report) {
  absl::StatusOr<proto::ReportEvaluationResponse> sent =
      chief_->ReportEvaluation(report, options_.rpc_timeout);
  if (!sent.ok()) {
    spdlog::warn("could not report to the chief: {}", sent.status().message());
    return;
  }
  phase_ = sent->phase();
  final_step_ = sent->final_checkpoint_step();
  chief_answered_ = absl::Now();
}

}  // namespace pst::evaluator
