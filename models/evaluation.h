// Evaluation of a trained model with the variables the ps hold now: what
// the chief reports at the end of a job, and `pstrain reference` after its
// single-process run.
#ifndef PST_MODELS_EVALUATION_H_
#define PST_MODELS_EVALUATION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "data/criteo.h"
#include "proto/pstrain.pb.h"

namespace pst::worker {

struct CtrEval {
  double auc = 0;
  double logloss = 0;
  int64_t examples = 0;
  int64_t version = 0;  // of the dense variables evaluated: the global step
};
// The wide & deep model of `training`, with the dense variables and the
// embedding rows pulled from `ps`, scored on every example of `data`.
// Errors: those of the pulls and of the model's checks of its inputs.
absl::StatusOr<CtrEval> EvaluateWideDeep(const proto::TrainingConfig& training,
                                         const CtrDataset& data, PsClient* ps);

}  // namespace pst::worker

#endif  // PST_MODELS_EVALUATION_H_
