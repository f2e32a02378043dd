#include "models/model.h"

#include "absl/strings/str_format.h"
#include "common/classifier_metrics.h"

namespace pst::models {

ModelEvaluation ClassifierEvaluation(const std::vector<float>& probs,
                                     const std::vector<float>& labels, int64_t global_step) {
  const double auc = common::Auc(probs, labels);
  const double logloss = common::LogLoss(probs, labels);
  const int64_t examples = static_cast<int64_t>(labels.size());
  ModelEvaluation result;
  result.metrics = {{"test_auc", auc}, {"test_logloss", logloss}};
  result.counts = {{"test_examples", examples}};
  result.line = absl::StrFormat("test AUC %.4f, test log-loss %.4f on %d held-out example(s)", auc,
                                logloss, examples);
  result.global_step = global_step;
  return result;
}

}  // namespace pst::models
