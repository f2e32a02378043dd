// An evaluator task (TF_CONFIG's "evaluator", as TensorFlow's sidecar
// evaluator): it waits for each new checkpoint the job saves, hands it to
// an evaluation (the built-in models' in C++, evaluator/builtin_eval.h; a
// Python model's through pstrain.Evaluator), and reports the metrics:
//   - to TensorBoard, as eval/<metric> in <summary_dir>/eval;
//   - to best/ under the checkpoint root, when it is the best so far
//     (evaluator/best_checkpoint.h);
//   - to the chief (ReportEvaluation), which keeps them in its summary JSON
//     and, at the end of the job, waits for the final checkpoint's.
// A corrupt checkpoint is reported as such (logged, and to the chief) and
// passed over. The session ends after the job's final checkpoint
// (ClusterState.final_checkpoint_step), or when the job is over with
// nothing left to evaluate. A restarted evaluator goes on after the newest
// checkpoint the chief has its report of (ClusterState.evaluated_steps).
//
// Thread-compatible: one thread calls Next and Report in turn.
#ifndef PST_EVALUATOR_EVALUATOR_SESSION_H_
#define PST_EVALUATOR_EVALUATOR_SESSION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/event_writer.h"
#include "common/process.h"
#include "evaluator/best_checkpoint.h"
#include "evaluator/checkpoint_watcher.h"
#include "evaluator/chief_link.h"
#include "proto/pstrain.pb.h"

namespace pst::evaluator {

struct EvaluatorOptions {
  int index = 0;               // this evaluator's task index
  std::string checkpoint_dir;  // the root the chief saves checkpoints under
  std::string summary_dir;     // TensorBoard: <summary_dir>/eval ("": none)
  std::string best_metric;     // "": see BestCheckpoint
  BestMode best_mode = BestMode::kAuto;
  absl::Duration poll_interval = absl::Seconds(1);
  // How long the chief may stay unreachable before the evaluator gives up.
  absl::Duration chief_timeout = absl::Minutes(5);
  absl::Duration rpc_timeout = absl::Seconds(10);
};

class EvaluatorSession {
 public:
  // Errors: InvalidArgument for an empty checkpoint_dir or an index below 0.
  static absl::StatusOr<std::unique_ptr<EvaluatorSession>> Create(EvaluatorOptions options,
                                                                  std::unique_ptr<ChiefLink> chief);

  // Waits for the next checkpoint to evaluate (corrupt ones are reported and
  // passed over here); nullopt when the job is over and every checkpoint up
  // to its final one was seen. Errors, each already reported to the chief
  // as fatal when it can be reached: NotFound when the checkpoint directory
  // still does not exist once the job has saved its final checkpoint;
  // FailedPrecondition when it is not a directory; Unavailable when the
  // chief has not answered for chief_timeout; Cancelled when `stop` is.
  absl::StatusOr<std::optional<FoundCheckpoint>> Next(const common::StopSignal& stop);
  // One look, as Next takes them every poll_interval: the next checkpoint,
  // or nullopt with `*over` false (none yet) or true (the job is over).
  // Errors: as Next's, but for Cancelled.
  absl::StatusOr<std::optional<FoundCheckpoint>> Look(bool* over);

  // The evaluation of `checkpoint` (from Next): written to TensorBoard,
  // offered to best/, sent to the chief (a chief that cannot be reached is
  // logged, not an error). Returns whether it is the new best (false too
  // when best/ could not be replaced: logged, and the report still goes
  // out). Errors: InvalidArgument for a metric that is not a finite number
  // or has an empty name (nothing is written).
  absl::StatusOr<bool> Report(const FoundCheckpoint& checkpoint,
                              const std::map<std::string, double>& metrics);

  // The evaluation of `checkpoint` failed with `error`: logged and reported
  // to the chief; the session goes on with the next one.
  void ReportFailure(const FoundCheckpoint& checkpoint, const absl::Status& error);

  // The evaluator gives up (`why`): reported to the chief as fatal.
  void GiveUp(const absl::Status& why);

  const EvaluatorOptions& options() const { return options_; }
  int evaluated() const { return evaluated_; }

 private:
  EvaluatorSession(EvaluatorOptions options, std::unique_ptr<ChiefLink> chief);

  // Asks the chief for the job's state; remembers it and when it last
  // answered. Errors: Unavailable once it has not for chief_timeout.
  absl::Status Poll();
  void Send(const proto::EvaluationReport& report);
  // Whether everything up to the job's final checkpoint has been seen.
  bool Finished() const;

  const EvaluatorOptions options_;
  const std::unique_ptr<ChiefLink> chief_;
  CheckpointWatcher watcher_;
  BestCheckpoint best_;
  std::unique_ptr<common::EventWriter> events_;
  proto::Phase phase_ = proto::PHASE_INIT;
  int64_t final_step_ = 0;  // 0: not known yet
  absl::Time chief_answered_;
  bool told_missing_ = false;
  bool resumed_ = false;  // the chief's first answer was read for past reports
  int evaluated_ = 0;
};

}  // namespace pst::evaluator

#endif  // PST_EVALUATOR_EVALUATOR_SESSION_H_
