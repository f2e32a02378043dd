#include "common/tensor_util.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bf16.h"
#include "common/status_macros.h"

namespace pst::common {

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<int64_t> NumElements(const Shape& shape, int64_t max_elements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has a negative dimension"));
    }
    if (d != 0 && n > max_elements / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has more than ", max_elements, " elements"));
    }
    n *= d;
  }
  return n;
}

absl::Status ValidateVariableSpec(const proto::VariableSpec& spec, int64_t max_elements) {
  if (spec.name().empty()) return absl::InvalidArgumentError("variable with an empty name");
  if (spec.dtype() != proto::DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(), "': dtype ",
                                                   proto::DType_Name(spec.dtype()),
                                                   " is not supported (only DT_FLOAT32)"));
  }
  if (spec.shape_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': rank-0 variables are not supported"));
  }
  for (int64_t d : spec.shape()) {
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(), "': shape ",
                                                     ShapeString(spec.shape()),
                                                     " must have positive dimensions"));
    }
  }
  absl::StatusOr<int64_t> n = NumElements(spec.shape(), max_elements);
  if (!n.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': ", n.status().message()));
  }
  return absl::OkStatus();
}

std::string DtypeName(proto::DType dtype) {
  const std::string& name = proto::DType_Name(dtype);
  return name.empty() ? absl::StrCat(static_cast<int>(dtype)) : name;
}

size_t WireElementBytes(proto::DType dtype) {
  switch (dtype) {
    case proto::DT_FLOAT32:
      return sizeof(float);
    case proto::DT_BFLOAT16:
      return sizeof(uint16_t);
    default:
      return 0;
  }
}

absl::Status CheckWireDtype(proto::DType dtype, absl::string_view what, bool unset_ok) {
  if (WireElementBytes(dtype) > 0 || (unset_ok && dtype == proto::DT_INVALID)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": dtype ", DtypeName(dtype), ", expected DT_FLOAT32 or DT_BFLOAT16"));
}

namespace {

absl::Status CheckShape(const proto::Tensor& tensor, const Shape& shape, absl::string_view what) {
  bool same_shape = tensor.shape_size() == shape.size();
  for (int i = 0; same_shape && i < shape.size(); ++i) same_shape = tensor.shape(i) == shape[i];
  if (!same_shape) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(tensor.shape()),
                                                   ", expected ", ShapeString(shape)));
  }
  return absl::OkStatus();
}

// CheckShape, and a payload of `payload_bytes` for its elements in the
// tensor's (wire) dtype.
absl::Status CheckShapeAndBytes(const proto::Tensor& tensor, size_t payload_bytes,
                                const Shape& shape, absl::string_view what) {
  PST_RETURN_IF_ERROR(CheckShape(tensor, shape, what));
  absl::StatusOr<int64_t> n = NumElements(shape);
  if (!n.ok()) return n.status();
  const uint64_t want = static_cast<uint64_t>(*n) * WireElementBytes(tensor.dtype());
  if (payload_bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": payload is ", payload_bytes, " bytes, expected ", want, " for shape ",
        ShapeString(shape),
        tensor.dtype() == proto::DT_FLOAT32 ? ""
                                            : absl::StrCat(" in ", DtypeName(tensor.dtype()))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTensorMatches(const proto::Tensor& tensor, const Shape& shape,
                                absl::string_view what) {
  if (tensor.dtype() != proto::DT_FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype ", DtypeName(tensor.dtype()), ", expected DT_FLOAT32"));
  }
  return CheckShapeAndBytes(tensor, tensor.data().size(), shape, what);
}

absl::Status CheckTensorMatches(const proto::Tensor& tensor, size_t payload_bytes,
                                const Shape& shape, absl::string_view what) {
  if (tensor.dtype() == proto::DT_SPARSE_FLOAT32) {
    // Its entries are checked as they are expanded (sparse_gradient.h).
    return CheckShape(tensor, shape, what);
  }
  if (WireElementBytes(tensor.dtype()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype ", DtypeName(tensor.dtype()),
                     ", expected DT_FLOAT32, DT_BFLOAT16 or DT_SPARSE_FLOAT32"));
  }
  return CheckShapeAndBytes(tensor, payload_bytes, shape, what);
}

void PackFloats(std::span<const float> values, const Shape& shape, proto::Tensor* tensor) {
  tensor->set_dtype(proto::DT_FLOAT32);
  *tensor->mutable_shape() = shape;
  tensor->mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float));
}

void UnpackFloats(const proto::Tensor& tensor, std::span<float> out) {
  // An empty span's data() may be null, which memcpy may not take even for
  // 0 bytes (a SYNC row push names every partition, most with no ids).
  if (out.empty()) return;
  std::memcpy(out.data(), tensor.data().data(), out.size() * sizeof(float));
}

namespace {

// Reads a payload's bytes in order across its pieces.
class PartsReader {
 public:
  explicit PartsReader(PayloadParts parts) : parts_(parts) {}
  // Copies the next `n` bytes into `out`. REQUIRES: n bytes remain.
  void Read(char* out, size_t n) {
    while (n > 0) {
      const std::string_view part = parts_[index_];
      const size_t take = std::min(n, part.size() - offset_);
      std::memcpy(out, part.data() + offset_, take);
      out += take;
      n -= take;
      offset_ += take;
      if (offset_ == part.size()) {
        ++index_;
        offset_ = 0;
      }
    }
  }

 private:
  PayloadParts parts_;
  size_t index_ = 0;
  size_t offset_ = 0;
};

}  // namespace

size_t PayloadBytes(PayloadParts parts) {
  size_t bytes = 0;
  for (std::string_view part : parts) bytes += part.size();
  return bytes;
}

void ForEachFloatBlock(PayloadParts parts,
                       const std::function<void(int64_t, std::span<const float>)>& fn) {
  alignas(64) float block[kFloatBlock];
  const int64_t count = static_cast<int64_t>(PayloadBytes(parts) / sizeof(float));
  PartsReader reader(parts);
  for (int64_t offset = 0; offset < count; offset += kFloatBlock) {
    const int64_t n = std::min(kFloatBlock, count - offset);
    reader.Read(reinterpret_cast<char*>(block), n * sizeof(float));
    fn(offset, std::span<const float>(block, n));
  }
}

void ForEachFloatBlock(std::string_view payload,
                       const std::function<void(int64_t, std::span<const float>)>& fn) {
  ForEachFloatBlock(PayloadParts(&payload, 1), fn);
}

void ForEachFloatBlock(PayloadParts parts, proto::DType dtype,
                       const std::function<void(int64_t, std::span<const float>)>& fn) {
  if (dtype != proto::DT_BFLOAT16) {
    ForEachFloatBlock(parts, fn);
    return;
  }
  alignas(64) float block[kFloatBlock];
  alignas(64) char half[kFloatBlock * sizeof(uint16_t)];
  const int64_t count = static_cast<int64_t>(PayloadBytes(parts) / sizeof(uint16_t));
  PartsReader reader(parts);
  for (int64_t offset = 0; offset < count; offset += kFloatBlock) {
    const int64_t n = std::min(kFloatBlock, count - offset);
    reader.Read(half, n * sizeof(uint16_t));
    DecodeBf16(half, std::span<float>(block, n));
    fn(offset, std::span<const float>(block, n));
  }
}

namespace {

// 1 when any of the `count` floats at `bytes` (any alignment) is NaN or Inf,
// i.e. has its exponent bits all ones. Each float is loaded with memcpy,
// which compiles to a plain (vector) load; no early exit, so the loop
// vectorizes.
uint32_t AnyNonFinite(const char* bytes, size_t count) {
  uint32_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes + i * sizeof(float), sizeof(float));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad;
}

}  // namespace

bool AllFinite(PayloadParts parts) {
  // Scanned where the bytes lie, piece by piece; a float cut between two
  // pieces is put together in `cut`. Pieces after the first bad float are
  // still read: a payload with a NaN is refused anyway, and the common case
  // has no branch to mispredict.
  uint32_t bad = 0;
  char cut[sizeof(float)];
  size_t in_cut = 0;
  for (std::string_view part : parts) {
    const char* p = part.data();
    size_t left = part.size();
    if (in_cut > 0) {
      const size_t take = std::min(sizeof(float) - in_cut, left);
      std::memcpy(cut + in_cut, p, take);
      in_cut += take;
      p += take;
      left -= take;
      if (in_cut < sizeof(float)) continue;
      bad |= AnyNonFinite(cut, 1);
      in_cut = 0;
    }
    const size_t whole = left / sizeof(float);
    bad |= AnyNonFinite(p, whole);
    in_cut = left - whole * sizeof(float);
    std::memcpy(cut, p + whole * sizeof(float), in_cut);
  }
  return bad == 0;
}

bool AllFinite(std::string_view payload) { return AllFinite(PayloadParts(&payload, 1)); }

bool AllFinite(PayloadParts parts, proto::DType dtype) {
  if (dtype != proto::DT_BFLOAT16) return AllFinite(parts);
  // As AllFinite's float scan, for 2-byte elements.
  bool bad = false;
  char cut[sizeof(uint16_t)];
  size_t in_cut = 0;
  for (std::string_view part : parts) {
    const char* p = part.data();
    size_t left = part.size();
    if (in_cut > 0 && left > 0) {
      cut[1] = *p++;
      --left;
      bad |= AnyNonFiniteBf16(cut, 1);
      in_cut = 0;
    }
    const size_t whole = left / sizeof(uint16_t);
    bad |= AnyNonFiniteBf16(p, whole);
    in_cut = left - whole * sizeof(uint16_t);
    if (in_cut > 0) cut[0] = p[whole * sizeof(uint16_t)];
  }
  return !bad;
}

void AddPayload(PayloadParts parts, std::span<float> sum) {
  AddPayload(parts, proto::DT_FLOAT32, sum);
}

void AddPayload(std::string_view payload, std::span<float> sum) {
  AddPayload(PayloadParts(&payload, 1), sum);
}

void AddPayload(PayloadParts parts, proto::DType dtype, std::span<float> sum) {
  ForEachFloatBlock(parts, dtype, [&](int64_t offset, std::span<const float> block) {
    if (static_cast<size_t>(offset) >= sum.size()) return;
    float* out = sum.data() + offset;
    const size_t n = std::min(block.size(), sum.size() - static_cast<size_t>(offset));
    for (size_t i = 0; i < n; ++i) out[i] += block[i];
  });
}

void CopyPayload(PayloadParts parts, std::span<float> out) {
  PartsReader(parts).Read(reinterpret_cast<char*>(out.data()), out.size() * sizeof(float));
}

void CopyPayload(PayloadParts parts, proto::DType dtype, std::span<float> out) {
  if (dtype != proto::DT_BFLOAT16) {
    CopyPayload(parts, out);
    return;
  }
  ForEachFloatBlock(parts, dtype, [&](int64_t offset, std::span<const float> block) {
    std::copy(block.begin(), block.end(), out.begin() + offset);
  });
}

void AppendAs(std::span<const float> values, proto::DType dtype, std::string* out) {
  if (dtype != proto::DT_BFLOAT16) {
    out->append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
    return;
  }
  const size_t at = out->size();
  out->resize(at + values.size() * sizeof(uint16_t));
  EncodeBf16(values, out->data() + at);
}

PayloadBufferPool& PayloadBufferPool::Default() {
  static auto* pool = new PayloadBufferPool(32 << 20);
  return *pool;
}

void PayloadBufferPool::Take(size_t bytes, std::string* data) {
  data->clear();
  if (bytes >= kMinPooledBytes) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const size_t capacity = buffers_[i]->capacity();
      if (capacity < bytes || capacity / 2 > bytes) continue;
      std::unique_ptr<std::string> buffer = std::move(buffers_[i]);
      buffers_[i] = std::move(buffers_.back());
      buffers_.pop_back();
      pooled_bytes_ -= capacity;
      ++reused_;
      data->swap(*buffer);
      GiveLocked(std::move(buffer));  // what *data held before (cleared there)
      return;
    }
    ++allocated_;
  }
  data->reserve(bytes);
}

void PayloadBufferPool::Give(std::unique_ptr<std::string> buffer) {
  if (buffer->capacity() < kMinPooledBytes) return;
  absl::MutexLock lock(&mu_);
  GiveLocked(std::move(buffer));
}

void PayloadBufferPool::GiveLocked(std::unique_ptr<std::string> buffer) {
  const size_t capacity = buffer->capacity();
  if (capacity < kMinPooledBytes || pooled_bytes_ + capacity > max_bytes_) return;
  buffer->clear();
  pooled_bytes_ += capacity;
  buffers_.push_back(std::move(buffer));
}

size_t PayloadBufferPool::pooled_bytes() const {
  absl::MutexLock lock(&mu_);
  return pooled_bytes_;
}

int64_t PayloadBufferPool::reused() const {
  absl::MutexLock lock(&mu_);
  return reused_;
}

int64_t PayloadBufferPool::allocated() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

}  // namespace pst::common
