// Tensors on the wire: a header (dtype, shape) and one bytes payload of
// little-endian values. Helpers to build, check and read them.
#ifndef PST_COMMON_TENSOR_UTIL_H_
#define PST_COMMON_TENSOR_UTIL_H_

#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/repeated_field.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

static_assert(std::endian::native == std::endian::little,
              "pstrain's wire format is little-endian; add byte swapping for this host");

using Shape = google::protobuf::RepeatedField<int64_t>;

// "[784, 256]".
std::string ShapeString(const Shape& shape);

// Number of elements. InvalidArgument for a negative dimension or a count
// that overflows int64 or exceeds `max_elements`.
absl::StatusOr<int64_t> NumElements(const Shape& shape, int64_t max_elements = INT64_MAX);

// Checks a variable spec as a ps receives it: non-empty name, float32,
// rank >= 1, positive dimensions, at most `max_elements` elements.
absl::Status ValidateVariableSpec(const proto::VariableSpec& spec, int64_t max_elements);

// Checks that `tensor` is a float32 tensor of exactly `shape`, with a
// payload of the matching size. `what` names it in errors ("gradient for
// 'dense_0/kernel'"). Returns InvalidArgument.
absl::Status CheckTensorMatches(const proto::Tensor& tensor, const Shape& shape,
                                absl::string_view what);

// Fills `tensor` with float32 `values` of `shape`.
// REQUIRES: NumElements(shape) == values.size().
void PackFloats(std::span<const float> values, const Shape& shape, proto::Tensor* tensor);

// Copies the payload of a float32 tensor into `out`.
// REQUIRES: tensor.data().size() == out.size() * sizeof(float).
void UnpackFloats(const proto::Tensor& tensor, std::span<float> out);

// A payload in pieces, read where it lies: the receive slices a gRPC
// message arrived in (rpc/wire_codec.h), or one whole string. The pieces
// need not be aligned, and an element may straddle two of them. Its
// elements are float32, or bf16 (common/bf16.h) where a function takes a
// dtype that says so.
using PayloadParts = std::span<const std::string_view>;
size_t PayloadBytes(PayloadParts parts);

// The dtype's name ("DT_BFLOAT16"), or its number for one this build does
// not know (it came over the network).
std::string DtypeName(proto::DType dtype);

// Bytes of one element of a dtype that travels on the wire: 4 for
// DT_FLOAT32, 2 for DT_BFLOAT16, 0 for any other.
size_t WireElementBytes(proto::DType dtype);
// An answer's wire dtype as requested: unset (DT_INVALID) is float32.
inline proto::DType AnswerDtype(proto::DType requested) {
  return requested == proto::DT_INVALID ? proto::DT_FLOAT32 : requested;
}
// OK for DT_FLOAT32 and DT_BFLOAT16, and for an unset dtype (DT_INVALID,
// float32) when `unset_ok`; else InvalidArgument naming `what`.
absl::Status CheckWireDtype(proto::DType dtype, absl::string_view what, bool unset_ok);

// CheckTensorMatches for a tensor whose payload, of `payload_bytes`, travels
// outside it (tensor.data() is ignored), in a wire dtype: float32 or bf16,
// or a gradient's DT_SPARSE_FLOAT32 (only its shape checked here: its
// entries are checked as they are expanded, common/sparse_gradient.h).
absl::Status CheckTensorMatches(const proto::Tensor& tensor, size_t payload_bytes,
                                const Shape& shape, absl::string_view what);

// Floats read from a payload block by block: calls fn(offset, block) for
// consecutive blocks of at most kFloatBlock floats (the last may be
// shorter), each copied into an aligned buffer small enough to stay in the
// L1 cache, so a consumer reads the payload once, with no unpacked copy
// and no type punning. REQUIRES: the payload's size % sizeof(float) == 0.
inline constexpr int64_t kFloatBlock = 2048;
void ForEachFloatBlock(PayloadParts parts,
                       const std::function<void(int64_t offset, std::span<const float> block)>& fn);
void ForEachFloatBlock(std::string_view payload,
                       const std::function<void(int64_t offset, std::span<const float> block)>& fn);
// The same of a payload of `dtype` (float32 or bf16), converted to floats
// block by block. REQUIRES: the payload's size % WireElementBytes(dtype) == 0.
void ForEachFloatBlock(PayloadParts parts, proto::DType dtype,
                       const std::function<void(int64_t offset, std::span<const float> block)>& fn);

// Whether every float32 in the payload is finite (no NaN, no Inf).
// REQUIRES: the payload's size % sizeof(float) == 0.
bool AllFinite(PayloadParts parts);
bool AllFinite(std::string_view payload);
// Of a payload of `dtype` (float32 or bf16).
bool AllFinite(PayloadParts parts, proto::DType dtype);

// sum[i] += payload float i, for every float of the payload.
// REQUIRES: sum.size() * sizeof(float) == the payload's size.
void AddPayload(PayloadParts parts, std::span<float> sum);
void AddPayload(std::string_view payload, std::span<float> sum);
// Of a payload of `dtype` (float32 or bf16): sum.size() elements.
void AddPayload(PayloadParts parts, proto::DType dtype, std::span<float> sum);

// Copies the payload's floats into `out`.
// REQUIRES: out.size() * sizeof(float) == the payload's size.
void CopyPayload(PayloadParts parts, std::span<float> out);
// Of a payload of `dtype` (float32 or bf16): out.size() elements.
void CopyPayload(PayloadParts parts, proto::DType dtype, std::span<float> out);

// Appends `values` to `out` in `dtype` (float32 or bf16; unset: float32).
void AppendAs(std::span<const float> values, proto::DType dtype, std::string* out);

// Payload buffers of answers, reused across requests instead of allocated
// for each: the ps fills a value's data string from here (Take), and the
// wire codec hands the buffer back once gRPC has sent it (Give). At most
// `max_bytes` of capacity is kept; buffers under kMinPooledBytes are not
// worth keeping. Thread-safe.
class PayloadBufferPool {
 public:
  static constexpr size_t kMinPooledBytes = 64 << 10;
  explicit PayloadBufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}
  PayloadBufferPool(const PayloadBufferPool&) = delete;
  PayloadBufferPool& operator=(const PayloadBufferPool&) = delete;

  // The process's pool (32 MiB: a few pieces in flight per connection).
  static PayloadBufferPool& Default();

  // Leaves *data empty with capacity for `bytes`: a kept buffer of at least
  // that capacity (and at most twice it) is swapped in if there is one; the
  // buffer *data held before goes into the pool in its place.
  void Take(size_t bytes, std::string* data);
  // Keeps `buffer`'s memory for a later Take, or frees it (too small, or
  // the pool is full).
  void Give(std::unique_ptr<std::string> buffer);

  size_t pooled_bytes() const;
  // Takes served from the pool, and those that had to allocate.
  int64_t reused() const;
  int64_t allocated() const;

 private:
  void GiveLocked(std::unique_ptr<std::string> buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<std::string>> buffers_ ABSL_GUARDED_BY(mu_);
  size_t pooled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pst::common

#endif  // PST_COMMON_TENSOR_UTIL_H_
