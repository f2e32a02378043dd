#include "chief/evaluations.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_format.h"

namespace pst::chief {

absl::Status EvaluationHistory::Report(const proto::EvaluationReport& report, absl::Time now) {
  const int index = report.evaluator_index();
  if (index < 0 || index >= num_evaluators_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReportEvaluation: evaluator index ", index, " outside [0, ", num_evaluators_,
                     ") (TF_CONFIG lists ", num_evaluators_, " evaluator task(s))"));
  }
  if (!(report.fatal() && report.checkpoint().empty())) {
    if (absl::Status name = common::CheckCheckpointName(report.checkpoint()); !name.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("ReportEvaluation: ", name.message()));
    }
  }
  if (report.global_step() < 0 || report.epochs_completed() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ReportEvaluation: negative global_step ",
                                                   report.global_step(), " or epochs_completed ",
                                                   report.epochs_completed()));
  }
  if (report.fatal() && report.error().empty()) {
    return absl::InvalidArgumentError("ReportEvaluation: a fatal report must say why (error)");
  }
  if (report.metrics_size() > kMaxEvalMetrics) {
    return absl::InvalidArgumentError(absl::StrCat("ReportEvaluation: ", report.metrics_size(),
                                                   " metrics, at most ", kMaxEvalMetrics));
  }
  for (const auto& [name, value] : report.metrics()) {
    if (name.empty() || name.size() > kMaxEvalMetricName) {
      return absl::InvalidArgumentError(absl::StrCat("ReportEvaluation: a metric name of ",
                                                     name.size(), " characters (1 to ",
                                                     kMaxEvalMetricName, ")"));
    }
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat("ReportEvaluation: metric '", name, "' is ",
                                                     value, ", not a finite number"));
    }
  }
  EvaluationRecord record;
  record.report = report;
  record.wall_seconds = absl::ToDoubleSeconds(now - job_start_);
  absl::MutexLock lock(&mu_);
  records_.push_back(std::move(record));
  return absl::OkStatus();
}

void EvaluationHistory::AddChiefEvaluation(int64_t step, int epochs_completed,
                                           const nlohmann::json& metrics, absl::Time now) {
  EvaluationRecord record;
  record.report.set_global_step(step);
  record.report.set_epochs_completed(epochs_completed);
  for (const auto& [name, value] : metrics.items()) {
    if (value.is_number()) (*record.report.mutable_metrics())[name] = value.get<double>();
  }
  record.by_chief = true;
  record.wall_seconds = absl::ToDoubleSeconds(now - job_start_);
  absl::MutexLock lock(&mu_);
  records_.push_back(std::move(record));
}

std::vector<EvaluationRecord> EvaluationHistory::All() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

std::map<int, int64_t> EvaluationHistory::ReportedSteps() const {
  std::map<int, int64_t> steps;
  absl::MutexLock lock(&mu_);
  for (const EvaluationRecord& r : records_) {
    if (r.by_chief || r.report.checkpoint().empty()) continue;
    auto [it, added] = steps.emplace(r.report.evaluator_index(), r.report.global_step());
    if (!added) it->second = std::max(it->second, r.report.global_step());
  }
  return steps;
}

absl::Status EvaluationHistory::AwaitStep(int64_t step, absl::Duration timeout) const {
  // Per evaluator: 0 waiting, 1 reported the step, 2 gave up.
  auto outcome = [&](int index) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    int state = 0;
    for (const EvaluationRecord& r : records_) {
      if (r.by_chief || r.report.evaluator_index() != index) continue;
      if (r.report.fatal()) state = 2;
      if (r.report.global_step() >= step && !r.report.checkpoint().empty()) state = 1;
    }
    return state;
  };
  auto settled = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (int i = 0; i < num_evaluators_; ++i) {
      if (outcome(i) == 0) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
  std::vector<std::string> waiting;
  for (int i = 0; i < num_evaluators_; ++i) {
    const int state = outcome(i);
    if (state == 0) waiting.push_back(absl::StrCat(i));
    if (state == 2) {
      for (auto r = records_.rbegin(); r != records_.rend(); ++r) {
        if (!r->by_chief && r->report.evaluator_index() == i && r->report.fatal()) {
          return absl::FailedPreconditionError(
              absl::StrCat("evaluator ", i, " gave up: ", r->report.error()));
        }
      }
    }
  }
  if (!waiting.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "evaluator(s) ", absl::StrJoin(waiting, ", "), " did not report the checkpoint of step ",
        step, " within ", absl::FormatDuration(timeout), " (--evaluator_wait_s)"));
  }
  return absl::OkStatus();
}

nlohmann::json EvaluationHistory::ToJson() const {
  nlohmann::json out;
  out["evaluations"] = nlohmann::json::array();
  const EvaluationRecord* best = nullptr;
  absl::MutexLock lock(&mu_);
  for (const EvaluationRecord& r : records_) {
    nlohmann::json e;
    e["source"] =
        r.by_chief ? std::string("chief") : absl::StrCat("evaluator ", r.report.evaluator_index());
    if (!r.report.checkpoint().empty()) e["checkpoint"] = r.report.checkpoint();
    e["global_step"] = r.report.global_step();
    e["epochs_completed"] = r.report.epochs_completed();
    e["wall_seconds"] = r.wall_seconds;
    if (!r.report.error().empty()) {
      e["error"] = r.report.error();
      if (r.report.fatal()) e["fatal"] = true;
    } else {
      e["metrics"] = nlohmann::json::object();
      for (const auto& [name, value] : r.report.metrics()) e["metrics"][name] = value;
    }
    if (r.report.best()) {
      e["best"] = true;
      best = &r;
    }
    out["evaluations"].push_back(std::move(e));
  }
  if (best != nullptr) {
    nlohmann::json b;
    b["checkpoint"] = best->report.checkpoint();
    b["global_step"] = best->report.global_step();
    b["metrics"] = nlohmann::json::object();
    for (const auto& [name, value] : best->report.metrics()) b["metrics"][name] = value;
    out["best_checkpoint"] = std::move(b);
  }
  return out;
}

}  // namespace pst::chief
