#include "models/gradient_clip.h"

#include <cmath>

namespace pst::models {

double ClipByGlobalNorm(double max_norm, std::initializer_list<client::Values*> parts) {
  if (max_norm <= 0) return 0;
  double sum = 0;
  for (const client::Values* part : parts) {
    for (const std::vector<float>& g : *part) {
      for (const float x : g) sum += static_cast<double>(x) * x;
    }
  }
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient >= 1) return norm;
  const float scale = static_cast<float>(coefficient);
  for (client::Values* part : parts) {
    for (std::vector<float>& g : *part) {
      for (float& x : g) x *= scale;
    }
  }
  return norm;
}

}  // namespace pst::models
