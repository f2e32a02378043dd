#include "models/evaluation.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/status_macros.h"
#include "models/ctr_batch.h"
#include "models/model_spec.h"
#include "models/wide_deep.h"

namespace pst::worker {

absl::StatusOr<CtrEval> EvaluateWideDeep(const proto::TrainingConfig& training,
                                         const CtrDataset& data, PsClient* ps) {
  PST_ASSIGN_OR_RETURN(WideDeepConfig config, WideDeepConfigFor(training));
  WideDeep model(config);
  Values params;
  PST_ASSIGN_OR_RETURN(const int64_t version, ps->Pull(&params));
  CtrBatchData batch;
  std::vector<float> probs, all_probs;
  std::vector<int64_t> examples;
  constexpr int64_t kChunk = 4096;
  for (int64_t first = 0; first < data.size; first += kChunk) {
    const int64_t n = std::min(kChunk, data.size - first);
    examples.resize(n);
    std::iota(examples.begin(), examples.end(), first);
    batch.Gather(data, examples.data(), n);
    PST_RETURN_IF_ERROR(ps->PullRows(batch.Tables(), &batch.rows));
    PST_RETURN_IF_ERROR(model.Predict(params, batch.View(n), &probs));
    all_probs.insert(all_probs.end(), probs.begin(), probs.end());
  }
  CtrEval eval;
  eval.examples = data.size;
  eval.version = version;
  eval.auc = Auc(all_probs, data.labels);
  eval.logloss = LogLoss(all_probs, data.labels);
  return eval;
}

}  // namespace pst::worker
