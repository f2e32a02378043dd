#include "ps_server/store/spec_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/status_macros.h"
#include "common/table_policy.h"
#include "ps_server/store/admission_filter.h"
#include "common/tensor_util.h"

namespace pst::ps {
namespace {

// Checks that `full_shape` has the rank and trailing dimensions of `shape`.
absl::Status CheckFullShape(const proto::VariableSpec& spec) {
  bool ok = spec.full_shape_size() == spec.shape_size();
  for (int i = 1; ok && i < spec.shape_size(); ++i) ok = spec.full_shape(i) == spec.shape(i);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", spec.name(), "': full_shape ", common::ShapeString(spec.full_shape()),
        " must have the rank and the dimensions after the first of shape ",
        common::ShapeString(spec.shape())));
  }
  return absl::OkStatus();
}

absl::Status CheckPartitionIndex(const proto::VariableSpec& spec) {
  if (spec.num_partitions() < 1 || spec.partition() < 0 ||
      spec.partition() >= spec.num_partitions()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", spec.name(), "': ", proto::Routing_Name(spec.routing()),
        " partition needs num_partitions >= 1 and 0 <= partition < num_partitions, got partition ",
        spec.partition(), " of ", spec.num_partitions()));
  }
  return absl::OkStatus();
}

absl::Status ValidateHashSpec(const proto::VariableSpec& spec, int64_t max_elements) {
  const std::string& name = spec.name();
  if (name.empty()) return absl::InvalidArgumentError("variable with an empty name");
  if (spec.dtype() != proto::DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "': dtype ",
                                                   proto::DType_Name(spec.dtype()),
                                                   " is not supported (only DT_FLOAT32)"));
  }
  if (spec.shape_size() == 0 || spec.shape(0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hash variable '", name, "' must have shape [0, dim...] (its rows are made on first ",
        "touch), got ", common::ShapeString(spec.shape())));
  }
  common::Shape row_shape;
  for (int i = 1; i < spec.shape_size(); ++i) {
    if (spec.shape(i) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("hash variable '", name, "': shape ",
                                                     common::ShapeString(spec.shape()),
                                                     " must have positive dimensions after the "
                                                     "first"));
    }
    row_shape.Add(spec.shape(i));
  }
  absl::StatusOr<int64_t> n = common::NumElements(row_shape, max_elements);
  if (!n.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hash variable '", name, "': one row: ", n.status().message()));
  }
  PST_RETURN_IF_ERROR(CheckPartitionIndex(spec));
  if (spec.admit_after() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hash variable '", name, "': admit_after must be >= 0, got ", spec.admit_after()));
  }
  PST_RETURN_IF_ERROR(AdmissionFilter::CheckAdmitAfter(spec.admit_after(), name));
  PST_RETURN_IF_ERROR(
      common::ParseTablePolicy(spec.capacity(), spec.eviction(),
                               absl::StrCat("hash variable '", name, "' (capacity, eviction)"))
          .status());
  if (spec.full_shape_size() > 0) {
    PST_RETURN_IF_ERROR(CheckFullShape(spec));
    if (spec.full_shape(0) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("hash variable '", name, "': full_shape ",
                                                     common::ShapeString(spec.full_shape()),
                                                     " has a negative dimension"));
    }
  }
  if (spec.initializer().kind() == proto::Initializer::GLOROT_UNIFORM &&
      (spec.full_shape_size() == 0 || spec.full_shape(0) <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hash variable '", name, "': glorot_uniform needs a row count in full_shape[0] for its ",
        "fans; give one, or use a uniform or normal initializer"));
  }
  return absl::OkStatus();
}

// A partition of MOD or DIV routing: TensorFlow's layout, N rows in P
// partitions, partition p holding N/P rows plus one if p < N%P.
absl::Status ValidateRangePartition(const proto::VariableSpec& spec) {
  const std::string& name = spec.name();
  PST_RETURN_IF_ERROR(CheckPartitionIndex(spec));
  PST_RETURN_IF_ERROR(CheckFullShape(spec));
  absl::StatusOr<int64_t> full = common::NumElements(spec.full_shape());
  if (!full.ok() || spec.full_shape(0) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "': bad full_shape ",
                                                   common::ShapeString(spec.full_shape())));
  }
  const int64_t n = spec.full_shape(0);
  const int64_t p = spec.partition(), np = spec.num_partitions();
  const int64_t size = n / np + (p < n % np ? 1 : 0);
  if (spec.shape(0) != size) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "': partition ", p, " of ",
                                                   np, " of ", n, " rows holds ", size,
                                                   " rows, but shape[0] is ", spec.shape(0)));
  }
  int64_t offset, stride;
  if (spec.routing() == proto::MOD) {
    offset = p;
    stride = np;
  } else {
    offset = p * (n / np) + std::min(p, n % np);
    stride = 1;
  }
  if (spec.row_offset() != offset || spec.row_stride() != stride) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", name, "': ", proto::Routing_Name(spec.routing()), " partition ", p, " of ",
        np, " of ", n, " rows needs row_offset ", offset, " and row_stride ", stride, ", got ",
        spec.row_offset(), " and ", spec.row_stride()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSpec(const proto::VariableSpec& spec, int64_t max_elements) {
  const proto::Routing routing = spec.routing();
  if (routing == proto::HASH) return ValidateHashSpec(spec, max_elements);
  if (routing != proto::ROUTING_NONE && routing != proto::MOD && routing != proto::DIV) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': unknown routing ", static_cast<int>(routing)));
  }
  if (spec.shape_size() > 0 && spec.shape(0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': shape ", common::ShapeString(spec.shape()),
                     " with 0 rows is only valid for a hash variable (routing HASH)"));
  }
  PST_RETURN_IF_ERROR(common::ValidateVariableSpec(spec, max_elements));
  if (spec.admit_after() > 1 || spec.admit_after() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': admit_after (", spec.admit_after(),
                     ") applies only to hash variables (routing HASH)"));
  }
  if (spec.capacity() != 0 || !spec.eviction().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", spec.name(), "': a capacity and eviction apply only to hash variables"));
  }
  if (routing != proto::ROUTING_NONE) return ValidateRangePartition(spec);
  bool same_full_shape = spec.full_shape_size() == 0;
  if (spec.full_shape_size() == spec.shape_size()) {
    same_full_shape =
        std::equal(spec.shape().begin(), spec.shape().end(), spec.full_shape().begin());
  }
  if (spec.num_partitions() > 1 || spec.partition() != 0 || spec.row_offset() != 0 ||
      spec.row_stride() > 1 || spec.row_stride() < 0 || !same_full_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': partition fields (partition ", spec.partition(),
                     " of ", spec.num_partitions(), ", full_shape ",
                     common::ShapeString(spec.full_shape()), ", row_offset ", spec.row_offset(),
                     ", row_stride ", spec.row_stride(), ") need routing MOD, DIV or HASH"));
  }
  return absl::OkStatus();
}

absl::Status CheckInitialValues(const proto::VariableSpec& spec, const std::string& values) {
  if (spec.routing() == proto::HASH) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", spec.name(), "' is a hash embedding and takes no initial values"));
  }
  PST_ASSIGN_OR_RETURN(const int64_t elements, common::NumElements(spec.shape()));
  if (static_cast<int64_t>(values.size()) != elements * static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", spec.name(), "': ", values.size(), " bytes of initial values for shape ",
        common::ShapeString(spec.shape()), ", which needs ", elements * sizeof(float)));
  }
  for (int64_t i = 0; i < elements; ++i) {
    float v;
    std::memcpy(&v, values.data() + i * sizeof(float), sizeof(float));
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(),
                                                     "': initial value ", i, " is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pst::ps
