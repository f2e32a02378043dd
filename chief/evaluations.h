// The evaluations of a job: what its evaluator tasks report for each
// checkpoint (ReportEvaluation), and the chief's own evaluations during
// training (--eval_every_epochs without an evaluator). The chief keeps them
// for the summary JSON and, at the end of the job, waits for the evaluators
// to report the final checkpoint.
//
// Thread-safety: safe for concurrent use (the coordinator service adds, the
// job's thread reads and waits).
#ifndef PST_CHIEF_EVALUATIONS_H_
#define PST_CHIEF_EVALUATIONS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::chief {

// Most metrics one report may carry, and the longest name.
inline constexpr int kMaxEvalMetrics = 64;
inline constexpr size_t kMaxEvalMetricName = 128;

struct EvaluationRecord {
  proto::EvaluationReport report;
  bool by_chief = false;    // the chief's own (else report.evaluator_index()'s)
  double wall_seconds = 0;  // since the job started
};

class EvaluationHistory {
 public:
  // `num_evaluators`: TF_CONFIG's evaluator tasks (reports from others are
  // refused).
  EvaluationHistory(int num_evaluators, absl::Time job_start)
      : num_evaluators_(num_evaluators), job_start_(job_start) {}

  int num_evaluators() const { return num_evaluators_; }

  // A report from an evaluator task. Errors (nothing is kept):
  // InvalidArgument for an index outside TF_CONFIG's evaluators, a
  // checkpoint name that is not "ckpt-<digits>" (empty only with an
  // error), a negative step, more than kMaxEvalMetrics metrics, an empty or
  // too long name, a value that is not finite, or a fatal report without an
  // error.
  absl::Status Report(const proto::EvaluationReport& report, absl::Time now);
  // The chief's own evaluation at `step`.
  void AddChiefEvaluation(int64_t step, int epochs_completed, const nlohmann::json& metrics,
                          absl::Time now);

  std::vector<EvaluationRecord> All() const;
  // By evaluator index, the step of the newest checkpoint each has
  // reported (evaluators that reported none are absent).
  std::map<int, int64_t> ReportedSteps() const;

  // Waits until every evaluator has reported a checkpoint of `step` or later
  // or given up (a fatal report), or `timeout` passes. OK when each
  // reported; DeadlineExceeded naming those that did not; FailedPrecondition
  // with the error of one that gave up.
  absl::Status AwaitStep(int64_t step, absl::Duration timeout) const;

  // {"evaluations": [{"source", "checkpoint", "global_step",
  // "epochs_completed", "wall_seconds", "metrics": {...}, "best"} or with
  // "error" instead of metrics, ...], "best_checkpoint": the last report
  // marked best (absent when none)}.
  nlohmann::json ToJson() const;

 private:
  const int num_evaluators_;
  const absl::Time job_start_;
  mutable absl::Mutex mu_;
  std::vector<EvaluationRecord> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::chief

#endif  // PST_CHIEF_EVALUATIONS_H_
