// The evaluation of a built-in model's checkpoint, in the evaluator's own
// process: the checkpoint is restored onto one in-process ps (as a restore
// onto another number of ps, with the ps's own checks), and the model's
// evaluation runs over the held-out data, as the chief's at the end of a job
// runs over the live ps.
//
// Thread-compatible.
#ifndef PST_EVALUATOR_BUILTIN_EVAL_H_
#define PST_EVALUATOR_BUILTIN_EVAL_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "evaluator/checkpoint_watcher.h"
#include "models/model.h"

namespace pst::evaluator {

class BuiltinEvaluation {
 public:
  // `data_dir`: where the models' held-out data is (--data_dir).
  explicit BuiltinEvaluation(std::string data_dir) : data_dir_(std::move(data_dir)) {}

  // The built-in model `training` names, if this evaluation can compute it.
  // Errors: the registry's for an unknown model; FailedPrecondition for a
  // model computed by its workers (a spec model: evaluate it with
  // pstrain.Evaluator).
  static absl::StatusOr<const models::Model*> ModelToEvaluate(
      const proto::TrainingConfig& training);

  // The metrics of `checkpoint` (its manifest names the model and its
  // configuration). Errors: ModelToEvaluate's; the model's and the
  // restore's errors (DataLoss for a corrupt shard).
  absl::StatusOr<std::map<std::string, double>> Evaluate(const FoundCheckpoint& checkpoint);

 private:
  const std::string data_dir_;
  // The held-out data, loaded once for the model configuration it is of.
  std::string data_for_;
  std::unique_ptr<models::ModelData> held_out_;
};

}  // namespace pst::evaluator

#endif  // PST_EVALUATOR_BUILTIN_EVAL_H_
