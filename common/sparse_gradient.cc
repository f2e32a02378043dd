#include "common/sparse_gradient.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace pst::common {
namespace {

// The magnitude an entry is ranked by: a NaN first of all.
float Rank(float x) {
  return std::isnan(x) ? std::numeric_limits<float>::infinity() : std::fabs(x);
}

}  // namespace

int64_t TopKCount(int64_t n, double ratio) {
  if (n <= 0) return 0;
  const auto k = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, 1, n);
}

void CompressTopK(std::span<const float> grad, std::span<const float> residual, int64_t k,
                  std::span<float> next_residual, std::vector<float>* payload) {
  const size_t n = grad.size();
  for (size_t i = 0; i < n; ++i) next_residual[i] = grad[i] + residual[i];
  payload->clear();
  if (k <= 0) return;  // an empty piece
  // The k-th largest magnitude: every entry above it is sent, and entries
  // equal to it from the lowest index on, until k are.
  thread_local std::vector<float> ranks;
  ranks.resize(n);
  for (size_t i = 0; i < n; ++i) ranks[i] = Rank(next_residual[i]);
  std::nth_element(ranks.begin(), ranks.begin() + (k - 1), ranks.end(), std::greater<float>());
  const float threshold = ranks[k - 1];
  int64_t above = 0;
  for (size_t i = 0; i < n; ++i) above += Rank(next_residual[i]) > threshold ? 1 : 0;
  int64_t ties = k - above;  // entries equal to the threshold still to send
  payload->resize(2 * k);
  float* indices = payload->data();
  float* values = payload->data() + k;
  int64_t sent = 0;
  for (size_t i = 0; i < n && sent < k; ++i) {
    const float rank = Rank(next_residual[i]);
    if (rank < threshold) continue;
    if (rank == threshold) {
      if (ties == 0) continue;
      --ties;
    }
    const auto index = static_cast<uint32_t>(i);
    std::memcpy(&indices[sent], &index, sizeof(index));
    values[sent] = next_residual[i];
    next_residual[i] = 0.0f;
    ++sent;
  }
}

absl::Status ExpandSparseGradient(PayloadParts payload, std::span<float> dense) {
  constexpr size_t kEntry = sizeof(uint32_t) + sizeof(float);
  const size_t bytes = PayloadBytes(payload);
  if (bytes % kEntry != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a sparse gradient of ", bytes,
                                                   " bytes is not a whole number of ", kEntry,
                                                   "-byte entries"));
  }
  const size_t k = bytes / kEntry;
  if (k > dense.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sparse gradient of ", k, " entries for a tensor of ", dense.size()));
  }
  std::vector<float> entries(2 * k);
  CopyPayload(payload, entries);
  std::fill(dense.begin(), dense.end(), 0.0f);
  int64_t previous = -1;
  for (size_t e = 0; e < k; ++e) {
    uint32_t index;
    std::memcpy(&index, &entries[e], sizeof(index));
    if (static_cast<int64_t>(index) <= previous || index >= dense.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a sparse gradient's entry ", e, " has index ", index,
          index >= dense.size() ? absl::StrCat(", past the tensor's ", dense.size(), " elements")
                                : absl::StrCat(", not above the one before (", previous, ")")));
    }
    dense[index] = entries[k + e];
    previous = index;
  }
  return absl::OkStatus();
}

}  // namespace pst::common
