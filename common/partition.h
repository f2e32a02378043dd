// Partitioning big variables along axis 0, and routing ids to partitions.
// Pure functions; safe from any thread.
//
// Partition sizes follow TensorFlow: N rows in P partitions give partition p
// N/P rows, plus one when p < N%P. Two routings map a global id (row) to
// (partition, local row), as tf.nn.embedding_lookup's partition_strategy:
//   MOD: partition id % P, local row id / P.
//   DIV: contiguous ranges in partition order; with q = N/P and r = N%P the
//        first r partitions hold q+1 rows, the rest q.
// HASH (hash embeddings, unbounded ids): partition uint64(id) % P; the ps
// keys rows by id.
#ifndef PST_COMMON_PARTITION_H_
#define PST_COMMON_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// How many partitions a variable of `rows` rows of `row_bytes` bytes gets.
// Each returns at least 1 and at most `rows` (never an empty partition).
// Errors: InvalidArgument for rows < 1, row_bytes < 1, or a non-positive
// limit.
//
// Fixed: min(num_shards, rows).
absl::StatusOr<int> FixedPartitions(int64_t rows, int num_shards);
// Min-max (TensorFlow's min_max_variable_partitioner): as many partitions
// as keep every slice at least `min_slice_bytes`, at most `max_partitions`.
absl::StatusOr<int> MinMaxPartitions(int64_t rows, int64_t row_bytes, int64_t min_slice_bytes,
                                     int max_partitions);
// Axis-size (TensorFlow's variable_axis_size_partitioner): the fewest
// partitions that keep every slice at most `max_shard_bytes` (a slice holds
// at least one row, so a row bigger than the limit gets one partition per
// row).
absl::StatusOr<int> AxisSizePartitions(int64_t rows, int64_t row_bytes, int64_t max_shard_bytes);

// Rows in each of `partitions` partitions of `rows`: rows/P, +1 for p < rows%P.
std::vector<int64_t> PartitionSizes(int64_t rows, int partitions);

struct RowLocation {
  int partition = 0;
  int64_t local_row = 0;
};

// Where global row `id` of a `rows`-row variable in `partitions` partitions
// lives. Errors: InvalidArgument naming the id and the valid range when id
// is outside [0, rows); InvalidArgument for routing other than MOD or DIV.
absl::StatusOr<RowLocation> RouteId(int64_t id, int64_t rows, int partitions,
                                    proto::Routing routing);

// The partition of a hash-embedding id: uint64(id) % partitions.
int HashPartition(int64_t id, int partitions);

// Splits a logical variable into `partitions` partition specs named
// "<name>/part_<p>" with variable, full_shape, partition, num_partitions,
// routing, row_offset and row_stride filled in (MOD: offset p, stride P;
// DIV: offset start_p, stride 1) and shape[0] = that partition's rows. With
// partitions == 1 and routing NONE, returns the spec unchanged. For HASH,
// every partition has shape [0, dim...].
// Errors: InvalidArgument for partitions < 1, more partitions than rows, a
// rank-0 spec, or routing NONE with partitions > 1.
absl::StatusOr<std::vector<proto::VariableSpec>> SplitVariable(const proto::VariableSpec& spec,
                                                               int partitions,
                                                               proto::Routing routing);

// Pieces of a dense variable for the data plane: with piece_bytes > 0 and
// the variable bigger than that, 'div' partitions of at most piece_bytes
// each (AxisSizePartitions); otherwise (or for a scalar) the spec alone,
// unchanged. Errors: as SplitVariable.
absl::StatusOr<std::vector<proto::VariableSpec>> SplitDense(const proto::VariableSpec& spec,
                                                            int64_t piece_bytes);

// The distinct values of ids[0..n) in first-seen order, and for each input
// position its index in `unique`: a batch's ids deduplicated before they are
// routed (and before a model gathers their rows).
void UniqueIds(const int64_t* ids, int64_t n, std::vector<int64_t>* unique,
               std::vector<int32_t>* index);

}  // namespace pst::common

#endif  // PST_COMMON_PARTITION_H_
