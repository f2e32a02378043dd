// Scores of a binary classifier's predictions against 0/1 labels: the area
// under the ROC curve and the log-loss, as the wide & deep model is judged
// (and as the synthetic Criteo generator rates its own ground truth).
// Pure functions; safe from any thread.
#ifndef PST_COMMON_CLASSIFIER_METRICS_H_
#define PST_COMMON_CLASSIFIER_METRICS_H_

#include <cmath>
#include <vector>

namespace pst::common {

// Area under the ROC curve, ties counted half (midranks). Returns 0.5 when
// only one class is present.
double Auc(const std::vector<float>& scores, const std::vector<float>& labels);
// Mean binary cross-entropy of probabilities, clipped to [1e-7, 1-1e-7].
double LogLoss(const std::vector<float>& probs, const std::vector<float>& labels);

// The logistic function, computed without overflow for large |z|.
inline float Sigmoid(float z) {
  if (z >= 0) return 1.0f / (1.0f + std::exp(-z));
  const float e = std::exp(z);
  return e / (1.0f + e);
}
inline double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

}  // namespace pst::common

#endif  // PST_COMMON_CLASSIFIER_METRICS_H_
