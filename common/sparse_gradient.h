// Top-k compression of dense gradients with error feedback
// (TrainingConfig.topk_ratio, --gradient_compression=topk:RATIO): a worker
// sends only the k entries of each dense gradient piece largest in
// magnitude, and keeps the rest in a residual it adds to the next step's
// gradient, so that nothing is lost, only delayed (the "error feedback" of
// Deep Gradient Compression and BytePS's compressors). The ps applies the
// k entries as the dense gradient they stand for, zeros elsewhere.
//
// Wire layout (Tensor dtype DT_SPARSE_FLOAT32, a dense gradient's payload
// of k entries, 8k bytes): k little-endian uint32 indices into the
// flattened tensor, strictly increasing, then their k float32 values.
//
// Pure functions; thread-safe.
#ifndef PST_COMMON_SPARSE_GRADIENT_H_
#define PST_COMMON_SPARSE_GRADIENT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor_util.h"

namespace pst::common {

// Entries of n that a ratio in (0, 1] keeps: ceil(ratio * n), at least 1
// (for n > 0), at most n.
int64_t TopKCount(int64_t n, double ratio);

// Error feedback's step for one piece: sum = grad + residual; the k
// entries of sum largest in magnitude (a NaN counts as the largest, so
// that the ps sees and refuses it; ties go to the lower index) go into
// `payload` in the wire layout (2k floats: the indices' bits, then the
// values), and the rest of sum into `next_residual` (zero where an entry
// was sent). So sent + next_residual == grad + residual, entry by entry,
// exactly. `residual` is left as it is: the caller keeps next_residual once
// the push is answered (a failed push is sent again from the same one).
// REQUIRES: grad, residual and next_residual of one size n < 2^32, and
// 0 <= k <= n (0 only for n == 0: an empty payload).
void CompressTopK(std::span<const float> grad, std::span<const float> residual, int64_t k,
                  std::span<float> next_residual, std::vector<float>* payload);

// The ps's side: writes into `dense` (n entries, zeroed first) the gradient
// a payload in the wire layout stands for.
// Errors: InvalidArgument for a payload that is not a whole number of
// entries, has more than n, or whose indices are not strictly increasing
// or not below n.
absl::Status ExpandSparseGradient(PayloadParts payload, std::span<float> dense);

}  // namespace pst::common

#endif  // PST_COMMON_SPARSE_GRADIENT_H_
