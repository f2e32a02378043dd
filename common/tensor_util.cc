#include "common/tensor_util.h"

#include <algorithm>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

absl::Status CheckTensorMatches(const proto::Tensor& tensor, const Shape& shape,
                                absl::string_view what) {
  if (tensor.dtype() != proto::DT_FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype ", proto::DType_Name(tensor.dtype()), ", expected DT_FLOAT32"));
  }
  bool same_shape = tensor.shape_size() == shape.size();
  for (int i = 0; same_shape && i < shape.size(); ++i) same_shape = tensor.shape(i) == shape[i];
  if (!same_shape) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(tensor.shape()),
                                                   ", expected ", ShapeString(shape)));
  }
  absl::StatusOr<int64_t> n = NumElements(shape);
  if (!n.ok()) return n.status();
  const uint64_t want = static_cast<uint64_t>(*n) * sizeof(float);
  if (tensor.data().size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": payload is ", tensor.data().size(),
                                                   " bytes, expected ", want, " for shape ",
                                                   ShapeString(shape)));
  }
  return absl::OkStatus();
}

void PackFloats(std::span<const float> values, const Shape& shape, proto::Tensor* tensor) {
  tensor->set_dtype(proto::DT_FLOAT32);
  *tensor->mutable_shape() = shape;
  tensor->mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float));
}

void UnpackFloats(const proto::Tensor& tensor, std::span<float> out) {
  std::memcpy(out.data(), tensor.data().data(), out.size() * sizeof(float));
}

void ForEachFloatBlock(std::string_view payload,
                       const std::function<void(int64_t, std::span<const float>)>& fn) {
  alignas(64) float block[kFloatBlock];
  const int64_t count = static_cast<int64_t>(payload.size() / sizeof(float));
  for (int64_t offset = 0; offset < count; offset += kFloatBlock) {
    const int64_t n = std::min(kFloatBlock, count - offset);
    std::memcpy(block, payload.data() + offset * sizeof(float), n * sizeof(float));
    fn(offset, std::span<const float>(block, n));
  }
}

bool AllFinite(std::string_view payload) {
  // A float is NaN or Inf when its exponent bits are all ones. Whole
  // blocks, with no early exit inside one, so the loop vectorizes.
  const char* bytes = payload.data();
  const size_t count = payload.size() / sizeof(float);
  for (size_t start = 0; start < count; start += kFloatBlock) {
    const size_t end = std::min<size_t>(count, start + kFloatBlock);
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes + i * sizeof(float), sizeof(bits));
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0) return false;
  }
  return true;
}

void AddPayload(std::string_view payload, std::span<float> sum) {
  const char* bytes = payload.data();
  float* out = sum.data();
  const size_t count = std::min(sum.size(), payload.size() / sizeof(float));
  for (size_t i = 0; i < count; ++i) {
    float x;
    std::memcpy(&x, bytes + i * sizeof(float), sizeof(x));
    out[i] += x;
  }
}

}  // namespace pst::common
