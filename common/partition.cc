#include "common/partition.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"

namespace pst::common {
namespace {

absl::Status CheckRowsAndRowBytes(int64_t rows, int64_t row_bytes) {
  if (rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a partitioned variable needs at least one row, got ", rows));
  }
  if (row_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a partitioned variable needs rows of at least one byte, got ", row_bytes));
  }
  return absl::OkStatus();
}

// ceil(a * b / c) for positive a, b, c, exact (the product may exceed int64),
// saturated at INT64_MAX.
int64_t CeilMulDiv(int64_t a, int64_t b, int64_t c) {
  const __int128 product = static_cast<__int128>(a) * b;
  const __int128 quotient = (product + c - 1) / c;
  return quotient > INT64_MAX ? INT64_MAX : static_cast<int64_t>(quotient);
}

// First global row of partition p under DIV: p * (rows / P) + min(p, rows % P).
int64_t DivStart(int64_t rows, int partitions, int p) {
  const int64_t q = rows / partitions;
  const int64_t r = rows % partitions;
  return p * q + std::min<int64_t>(p, r);
}

}  // namespace

absl::StatusOr<int> FixedPartitions(int64_t rows, int num_shards) {
  PST_RETURN_IF_ERROR(CheckRowsAndRowBytes(rows, 1));
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("fixed partitioner: num_shards must be at least 1, got ", num_shards));
  }
  return static_cast<int>(std::min<int64_t>(num_shards, rows));
}

absl::StatusOr<int> MinMaxPartitions(int64_t rows, int64_t row_bytes, int64_t min_slice_bytes,
                                     int max_partitions) {
  PST_RETURN_IF_ERROR(CheckRowsAndRowBytes(rows, row_bytes));
  if (min_slice_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min-max partitioner: min_slice_bytes must be at least 1, got ", min_slice_bytes));
  }
  if (max_partitions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min-max partitioner: max_partitions must be at least 1, got ", max_partitions));
  }
  // As TensorFlow: ceil(total_bytes / min_slice_bytes), capped by
  // max_partitions and by the rows (a partition holds at least one row).
  const int64_t slices = CeilMulDiv(rows, row_bytes, min_slice_bytes);
  const int64_t partitions = std::min({slices, rows, static_cast<int64_t>(max_partitions)});
  return static_cast<int>(std::max<int64_t>(1, partitions));
}

absl::StatusOr<int> AxisSizePartitions(int64_t rows, int64_t row_bytes, int64_t max_shard_bytes) {
  PST_RETURN_IF_ERROR(CheckRowsAndRowBytes(rows, row_bytes));
  if (max_shard_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "axis-size partitioner: max_shard_bytes must be at least 1, got ", max_shard_bytes));
  }
  // As TensorFlow: a slice holds whole rows, at least one.
  const int64_t rows_per_slice = std::max<int64_t>(1, max_shard_bytes / row_bytes);
  const int64_t partitions = rows / rows_per_slice + (rows % rows_per_slice != 0 ? 1 : 0);
  if (partitions > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "axis-size partitioner: ", rows, " rows of ", row_bytes, " bytes with max_shard_bytes ",
        max_shard_bytes, " would need ", partitions, " partitions, more than ", INT_MAX));
  }
  return static_cast<int>(partitions);
}

// partitions < 1 gives an empty vector; rows < 0 counts as 0 rows. More
// partitions than rows gives the trailing partitions 0 rows ((2, 5) ->
// {1, 1, 0, 0, 0}), as the formula does.
std::vector<int64_t> PartitionSizes(int64_t rows, int partitions) {
  if (partitions < 1) return {};
  rows = std::max<int64_t>(0, rows);
  const int64_t q = rows / partitions;
  const int64_t r = rows % partitions;
  std::vector<int64_t> sizes(partitions);
  for (int p = 0; p < partitions; ++p) sizes[p] = q + (p < r ? 1 : 0);
  return sizes;
}

absl::StatusOr<RowLocation> RouteId(int64_t id, int64_t rows, int partitions,
                                    proto::Routing routing) {
  if (partitions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing needs at least one partition, got ", partitions));
  }
  if (routing != proto::MOD && routing != proto::DIV) {
    return absl::InvalidArgumentError(
        absl::StrCat("RouteId handles MOD and DIV routing, got ",
                     proto::Routing_IsValid(routing) ? proto::Routing_Name(routing)
                                                     : absl::StrCat(static_cast<int>(routing)),
                     routing == proto::HASH ? " (hash ids go through HashPartition)" : ""));
  }
  if (rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("id ", id, " cannot be routed: the variable has ", rows, " rows"));
  }
  if (id < 0 || id >= rows) {
    return absl::InvalidArgumentError(absl::StrCat("id ", id, " is out of range for a variable of ",
                                                   rows, " rows (valid: 0..", rows - 1, ")"));
  }
  RowLocation loc;
  if (routing == proto::MOD) {
    loc.partition = static_cast<int>(id % partitions);
    loc.local_row = id / partitions;
    return loc;
  }
  // DIV: the first r partitions hold q + 1 rows, the rest q.
  const int64_t q = rows / partitions;
  const int64_t r = rows % partitions;
  const int64_t big_rows = r * (q + 1);  // rows held by the first r partitions
  if (id < big_rows) {
    loc.partition = static_cast<int>(id / (q + 1));
    loc.local_row = id % (q + 1);
  } else {
    // Here q >= 1: with q == 0 every row lies in the first r partitions.
    loc.partition = static_cast<int>(r + (id - big_rows) / q);
    loc.local_row = (id - big_rows) % q;
  }
  return loc;
}

// partitions < 1 gives 0 (there is no valid answer; callers check first).
int HashPartition(int64_t id, int partitions) {
  if (partitions < 1) return 0;
  return static_cast<int>(static_cast<uint64_t>(id) % static_cast<uint64_t>(partitions));
}

absl::StatusOr<std::vector<proto::VariableSpec>> SplitVariable(const proto::VariableSpec& spec,
                                                               int partitions,
                                                               proto::Routing routing) {
  if (spec.shape_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': a rank-0 variable cannot be partitioned"));
  }
  for (int64_t d : spec.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(), "': shape ",
                                                     ShapeString(spec.shape()),
                                                     " has a negative dimension"));
    }
  }
  if (partitions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", spec.name(), "': needs at least one partition, got ", partitions));
  }
  if (!proto::Routing_IsValid(routing)) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': unknown routing ", static_cast<int>(routing)));
  }
  if (routing == proto::ROUTING_NONE) {
    if (partitions > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", spec.name(), "': ", partitions,
                       " partitions need a routing (MOD, DIV or HASH), got ROUTING_NONE"));
    }
    return std::vector<proto::VariableSpec>{spec};
  }
  const int64_t rows = spec.shape(0);
  if (routing != proto::HASH && partitions > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': ", partitions, " partitions for ", rows,
                     " rows; every partition needs at least one row"));
  }

  const std::vector<int64_t> sizes = PartitionSizes(rows, partitions);
  std::vector<proto::VariableSpec> parts;
  parts.reserve(partitions);
  for (int p = 0; p < partitions; ++p) {
    // Starting from a copy keeps dtype, initializer, admit_after and the
    // other dimensions.
    proto::VariableSpec part = spec;
    part.set_name(absl::StrCat(spec.name(), "/part_", p));
    part.set_variable(spec.name());
    *part.mutable_full_shape() = spec.shape();
    part.set_partition(p);
    part.set_num_partitions(partitions);
    part.set_routing(routing);
    switch (routing) {
      case proto::MOD:
        part.set_shape(0, sizes[p]);
        part.set_row_offset(p);
        part.set_row_stride(partitions);
        break;
      case proto::DIV:
        part.set_shape(0, sizes[p]);
        part.set_row_offset(DivStart(rows, partitions, p));
        part.set_row_stride(1);
        break;
      default:  // HASH: rows are created on first touch.
        part.set_shape(0, 0);
        part.set_row_offset(0);
        part.set_row_stride(0);
        break;
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

absl::StatusOr<std::vector<proto::VariableSpec>> SplitDense(const proto::VariableSpec& spec,
                                                            int64_t piece_bytes) {
  if (piece_bytes <= 0 || spec.shape_size() == 0) return std::vector<proto::VariableSpec>{spec};
  const int64_t rows = spec.shape(0);
  int64_t row_bytes = sizeof(float);
  for (int d = 1; d < spec.shape_size(); ++d) row_bytes *= spec.shape(d);
  if (rows < 1 || row_bytes < 1 || rows * row_bytes <= piece_bytes) {
    return std::vector<proto::VariableSpec>{spec};
  }
  absl::StatusOr<int> parts = AxisSizePartitions(rows, row_bytes, piece_bytes);
  if (!parts.ok()) return parts.status();
  if (*parts == 1) return std::vector<proto::VariableSpec>{spec};
  return SplitVariable(spec, *parts, proto::DIV);
}

void UniqueIds(const int64_t* ids, int64_t n, std::vector<int64_t>* unique,
               std::vector<int32_t>* index) {
  if (unique == nullptr || index == nullptr) return;
  unique->clear();
  index->clear();
  if (ids == nullptr || n <= 0) return;
  index->resize(static_cast<size_t>(n));
  absl::flat_hash_map<int64_t, int32_t> position;
  position.reserve(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
  for (int64_t i = 0; i < n; ++i) {
    const auto [it, inserted] = position.try_emplace(ids[i], static_cast<int32_t>(unique->size()));
    if (inserted) unique->push_back(ids[i]);
    (*index)[i] = it->second;
  }
}

}  // namespace pst::common
