#include "common/classifier_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

namespace pst::common {
namespace {

// Probabilities are clipped to [kProbClip, 1 - kProbClip] by LogLoss.
constexpr double kProbClip = 1e-7;

}  // namespace

// Scores are ranked in ascending order, a run of equal scores sharing the
// mean of its ranks; AUC = (sum of positive ranks - P(P+1)/2) / (P*N). A
// label counts as positive when > 0.5; NaN scores rank lowest. Should the
// two vectors differ in length, only the common prefix counts.
double Auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  const size_t n = std::min(scores.size(), labels.size());
  std::vector<float> key(n);
  for (size_t i = 0; i < n; ++i) {
    key[i] = std::isnan(scores[i]) ? -std::numeric_limits<float>::infinity() : scores[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&key](size_t a, size_t b) { return key[a] < key[b]; });

  double positives = 0;
  double positive_rank_sum = 0;
  size_t start = 0;
  while (start < n) {
    size_t end = start + 1;
    while (end < n && key[order[end]] == key[order[start]]) ++end;
    // Positions start..end-1 hold ranks start+1..end; their mean:
    const double midrank = 0.5 * static_cast<double>(start + 1 + end);
    for (size_t k = start; k < end; ++k) {
      if (labels[order[k]] > 0.5f) {
        positives += 1;
        positive_rank_sum += midrank;
      }
    }
    start = end;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

// Labels count as positive when > 0.5. Should the two vectors differ in
// length, only the common prefix counts; an empty input gives 0.
double LogLoss(const std::vector<float>& probs, const std::vector<float>& labels) {
  const size_t n = std::min(probs.size(), labels.size());
  if (n == 0) return 0;
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    double p = probs[i];
    if (!(p >= kProbClip)) p = kProbClip;  // also NaN
    if (p > 1 - kProbClip) p = 1 - kProbClip;
    total -= labels[i] > 0.5f ? std::log(p) : std::log1p(-p);
  }
  return total / static_cast<double>(n);
}

}  // namespace pst::common
