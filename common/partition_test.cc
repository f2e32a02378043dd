#include "common/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pst::common {
namespace {

using Loc = std::pair<int, int64_t>;  // (partition, local row)

// Every id of a `rows`-row variable routed, in id order.
std::vector<Loc> RouteAll(int64_t rows, int partitions, proto::Routing routing) {
  std::vector<Loc> out;
  for (int64_t id = 0; id < rows; ++id) {
    absl::StatusOr<RowLocation> loc = RouteId(id, rows, partitions, routing);
    EXPECT_TRUE(loc.ok()) << "id " << id << ": " << loc.status();
    if (loc.ok()) out.emplace_back(loc->partition, loc->local_row);
  }
  return out;
}

proto::VariableSpec Spec(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(0.05f);
  spec.mutable_initializer()->set_seed(17);
  return spec;
}

// For every id: RouteId's (partition, local row) is a row SplitVariable's
// partition holds, and maps back to the id through row_offset/row_stride.
// And every row of every partition routes back to itself.
void ExpectRoundTrip(int64_t rows, int partitions, proto::Routing routing) {
  SCOPED_TRACE(testing::Message() << rows << " rows, " << partitions << " partitions, "
                                  << proto::Routing_Name(routing));
  absl::StatusOr<std::vector<proto::VariableSpec>> parts =
      SplitVariable(Spec("v", {rows, 2}), partitions, routing);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), static_cast<size_t>(partitions));
  for (int64_t id = 0; id < rows; ++id) {
    absl::StatusOr<RowLocation> loc = RouteId(id, rows, partitions, routing);
    ASSERT_TRUE(loc.ok()) << loc.status();
    ASSERT_GE(loc->partition, 0);
    ASSERT_LT(loc->partition, partitions);
    const proto::VariableSpec& part = (*parts)[loc->partition];
    EXPECT_GE(loc->local_row, 0) << "id " << id;
    EXPECT_LT(loc->local_row, part.shape(0)) << "id " << id;
    EXPECT_EQ(part.row_offset() + loc->local_row * part.row_stride(), id) << "id " << id;
  }
  int64_t total = 0;
  for (int p = 0; p < partitions; ++p) {
    const proto::VariableSpec& part = (*parts)[p];
    total += part.shape(0);
    for (int64_t r = 0; r < part.shape(0); ++r) {
      const int64_t global = part.row_offset() + r * part.row_stride();
      absl::StatusOr<RowLocation> loc = RouteId(global, rows, partitions, routing);
      ASSERT_TRUE(loc.ok()) << loc.status();
      EXPECT_EQ(Loc(loc->partition, loc->local_row), Loc(p, r)) << "global row " << global;
    }
  }
  EXPECT_EQ(total, rows);
}

// --- PartitionSizes ---------------------------------------------------------

TEST(PartitionTest, PartitionSizes_UnevenSplit_FirstPartitionsGetTheExtraRows) {
  EXPECT_EQ(PartitionSizes(10, 3), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(PartitionSizes(11, 4), (std::vector<int64_t>{3, 3, 3, 2}));
}

TEST(PartitionTest, PartitionSizes_EvenSplit_AllEqual) {
  EXPECT_EQ(PartitionSizes(9, 3), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(PartitionSizes(7, 7), (std::vector<int64_t>(7, 1)));
  EXPECT_EQ(PartitionSizes(5, 1), (std::vector<int64_t>{5}));
}

TEST(PartitionTest, PartitionSizes_MorePartitionsThanRows_TrailingPartitionsEmpty) {
  EXPECT_EQ(PartitionSizes(2, 5), (std::vector<int64_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(PartitionSizes(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(PartitionTest, PartitionSizes_BadInput_EmptyOrZeroRows) {
  EXPECT_TRUE(PartitionSizes(10, 0).empty());
  EXPECT_TRUE(PartitionSizes(10, -3).empty());
  EXPECT_EQ(PartitionSizes(-4, 2), (std::vector<int64_t>{0, 0}));
}

// --- Partitioners -----------------------------------------------------------

TEST(PartitionTest, FixedPartitions_CappedByRows) {
  EXPECT_EQ(FixedPartitions(10, 4).value(), 4);
  EXPECT_EQ(FixedPartitions(3, 8).value(), 3);
  EXPECT_EQ(FixedPartitions(1, 1).value(), 1);
}

TEST(PartitionTest, FixedPartitions_BadInput_IsInvalidArgument) {
  EXPECT_EQ(FixedPartitions(0, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FixedPartitions(-1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FixedPartitions(10, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FixedPartitions(10, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PartitionTest, MinMaxPartitions_HandComputed) {
  // 1000 x 400 = 400000 bytes; / 100000 = 4 slices, under the max of 8.
  EXPECT_EQ(MinMaxPartitions(1000, 400, 100000, 8).value(), 4);
  // 400000 / 150000 = 2.67 -> 3.
  EXPECT_EQ(MinMaxPartitions(1000, 400, 150000, 8).value(), 3);
  // TensorFlow's default min_slice_size, 256 KiB: 400000 / 262144 = 1.53 -> 2.
  EXPECT_EQ(MinMaxPartitions(1000, 400, 256 << 10, 8).value(), 2);
  // Capped by max_partitions.
  EXPECT_EQ(MinMaxPartitions(1000, 400, 100000, 2).value(), 2);
  // A variable smaller than one slice: 1.
  EXPECT_EQ(MinMaxPartitions(1000, 400, 1 << 30, 8).value(), 1);
  // Capped by the rows: 3 x 400000 = 1.2 MB would make 12 slices of 100000.
  EXPECT_EQ(MinMaxPartitions(3, 400000, 100000, 8).value(), 3);
  // Total bytes beyond int64 still work.
  EXPECT_EQ(MinMaxPartitions(INT64_MAX / 2, 1000, 1, 16).value(), 16);
}

TEST(PartitionTest, MinMaxPartitions_BadInput_IsInvalidArgument) {
  EXPECT_EQ(MinMaxPartitions(0, 400, 100000, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MinMaxPartitions(1000, 0, 100000, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MinMaxPartitions(1000, 400, 0, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MinMaxPartitions(1000, 400, 100000, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PartitionTest, AxisSizePartitions_HandComputed) {
  // 4000 / 400 = 10 rows a slice; 95 rows -> ceil(9.5) = 10 partitions.
  EXPECT_EQ(AxisSizePartitions(95, 400, 4000).value(), 10);
  EXPECT_EQ(AxisSizePartitions(100, 400, 4000).value(), 10);
  EXPECT_EQ(AxisSizePartitions(101, 400, 4000).value(), 11);
  // 4100 / 400 = 10 whole rows (4000 bytes) a slice, not 10.25.
  EXPECT_EQ(AxisSizePartitions(101, 400, 4100).value(), 11);
  // Fits in one slice.
  EXPECT_EQ(AxisSizePartitions(10, 4, 1 << 20).value(), 1);
  // A row bigger than the limit: one partition a row.
  EXPECT_EQ(AxisSizePartitions(5, 5000, 4000).value(), 5);
}

TEST(PartitionTest, AxisSizePartitions_BadInput_IsInvalidArgument) {
  EXPECT_EQ(AxisSizePartitions(0, 400, 4000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AxisSizePartitions(95, 0, 4000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AxisSizePartitions(95, 400, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AxisSizePartitions(95, 400, -1).status().code(), absl::StatusCode::kInvalidArgument);
  // 3e9 partitions do not fit an int.
  EXPECT_EQ(AxisSizePartitions(3'000'000'000LL, 100, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- RouteId ----------------------------------------------------------------

TEST(PartitionTest, RouteId_Mod_TenRowsThreePartitions) {
  // id -> (id % 3, id / 3).
  const std::vector<Loc> want = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                 {2, 1}, {0, 2}, {1, 2}, {2, 2}, {0, 3}};
  EXPECT_EQ(RouteAll(10, 3, proto::MOD), want);
}

TEST(PartitionTest, RouteId_DivUnevenSplit_MatchesTensorFlow) {
  // Sizes 4, 3, 3: ids 0-3 in partition 0, 4-6 in 1, 7-9 in 2.
  const std::vector<Loc> want = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0},
                                 {1, 1}, {1, 2}, {2, 0}, {2, 1}, {2, 2}};
  EXPECT_EQ(RouteAll(10, 3, proto::DIV), want);
  // Sizes 3, 3, 3, 2.
  const std::vector<Loc> want11 = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2},
                                   {2, 0}, {2, 1}, {2, 2}, {3, 0}, {3, 1}};
  EXPECT_EQ(RouteAll(11, 4, proto::DIV), want11);
}

TEST(PartitionTest, RouteId_DivAndMod_MatchTensorFlowFormulas) {
  // tf.nn.embedding_lookup, partition_strategy="div":
  //   p = max(id // (q + 1), (id - r) // q), local = id - start_p.
  // partition_strategy="mod": p = id % P, local = id // P.
  for (int64_t n = 1; n <= 40; ++n) {
    for (int np = 1; np <= n; ++np) {
      const int64_t q = n / np;
      const int64_t r = n % np;
      for (int64_t id = 0; id < n; ++id) {
        const int64_t p = std::max(id / (q + 1), (id - r) / q);
        const int64_t start = p * q + std::min(p, r);
        absl::StatusOr<RowLocation> div = RouteId(id, n, np, proto::DIV);
        ASSERT_TRUE(div.ok()) << div.status();
        EXPECT_EQ(Loc(div->partition, div->local_row), Loc(static_cast<int>(p), id - start))
            << "DIV n=" << n << " P=" << np << " id=" << id;
        absl::StatusOr<RowLocation> mod = RouteId(id, n, np, proto::MOD);
        ASSERT_TRUE(mod.ok()) << mod.status();
        EXPECT_EQ(Loc(mod->partition, mod->local_row), Loc(static_cast<int>(id % np), id / np))
            << "MOD n=" << n << " P=" << np << " id=" << id;
      }
    }
  }
}

TEST(PartitionTest, RouteId_OneRowPerPartition_IdIsPartition) {
  std::vector<Loc> want;
  for (int id = 0; id < 7; ++id) want.emplace_back(id, 0);
  EXPECT_EQ(RouteAll(7, 7, proto::MOD), want);
  EXPECT_EQ(RouteAll(7, 7, proto::DIV), want);
}

TEST(PartitionTest, RouteId_OnePartition_LocalRowIsId) {
  std::vector<Loc> want;
  for (int id = 0; id < 10; ++id) want.emplace_back(0, id);
  EXPECT_EQ(RouteAll(10, 1, proto::MOD), want);
  EXPECT_EQ(RouteAll(10, 1, proto::DIV), want);
}

TEST(PartitionTest, RouteId_OutOfRange_IsInvalidArgumentNamingIdAndRange) {
  for (proto::Routing routing : {proto::MOD, proto::DIV}) {
    absl::StatusOr<RowLocation> low = RouteId(-1, 10, 3, routing);
    EXPECT_EQ(low.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(low.status().message(),
              "id -1 is out of range for a variable of 10 rows (valid: 0..9)");
    absl::StatusOr<RowLocation> high = RouteId(10, 10, 3, routing);
    EXPECT_EQ(high.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(high.status().message(),
              "id 10 is out of range for a variable of 10 rows (valid: 0..9)");
    absl::StatusOr<RowLocation> far = RouteId(12, 10, 3, routing);
    EXPECT_EQ(far.status().message(),
              "id 12 is out of range for a variable of 10 rows (valid: 0..9)");
  }
}

TEST(PartitionTest, RouteId_BadRoutingOrPartitions_IsInvalidArgument) {
  EXPECT_EQ(RouteId(0, 10, 3, proto::ROUTING_NONE).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<RowLocation> hash = RouteId(0, 10, 3, proto::HASH);
  EXPECT_EQ(hash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hash.status().message().find("HashPartition"), absl::string_view::npos)
      << hash.status();
  EXPECT_EQ(RouteId(0, 10, 3, static_cast<proto::Routing>(42)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RouteId(0, 10, 0, proto::MOD).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RouteId(0, 0, 1, proto::DIV).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- HashPartition ----------------------------------------------------------

TEST(PartitionTest, HashPartition_IsUnsignedIdModP) {
  EXPECT_EQ(HashPartition(10, 3), 1);
  EXPECT_EQ(HashPartition(9, 3), 0);
  EXPECT_EQ(HashPartition(123456789, 1), 0);
  // uint64(-1) = 2^64 - 1, divisible by 3; 2^64 = 2 (mod 7), so 1 (mod 7).
  EXPECT_EQ(HashPartition(-1, 3), 0);
  EXPECT_EQ(HashPartition(-1, 7), 1);
  EXPECT_EQ(HashPartition(INT64_MIN, 2), 0);
  EXPECT_EQ(HashPartition(5, 0), 0);  // no valid answer; does not crash
}

// --- SplitVariable ----------------------------------------------------------

TEST(PartitionTest, SplitVariable_Div_FillsEveryField) {
  proto::VariableSpec spec = Spec("emb", {10, 4});
  absl::StatusOr<std::vector<proto::VariableSpec>> parts = SplitVariable(spec, 3, proto::DIV);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  const int64_t want_rows[] = {4, 3, 3};
  const int64_t want_offset[] = {0, 4, 7};
  for (int p = 0; p < 3; ++p) {
    const proto::VariableSpec& part = (*parts)[p];
    EXPECT_EQ(part.name(), "emb/part_" + std::to_string(p));
    EXPECT_EQ(part.variable(), "emb");
    EXPECT_EQ(part.dtype(), proto::DT_FLOAT32);
    ASSERT_EQ(part.shape_size(), 2);
    EXPECT_EQ(part.shape(0), want_rows[p]);
    EXPECT_EQ(part.shape(1), 4);
    ASSERT_EQ(part.full_shape_size(), 2);
    EXPECT_EQ(part.full_shape(0), 10);
    EXPECT_EQ(part.full_shape(1), 4);
    EXPECT_EQ(part.partition(), p);
    EXPECT_EQ(part.num_partitions(), 3);
    EXPECT_EQ(part.routing(), proto::DIV);
    EXPECT_EQ(part.row_offset(), want_offset[p]);
    EXPECT_EQ(part.row_stride(), 1);
    EXPECT_EQ(part.initializer().SerializeAsString(), spec.initializer().SerializeAsString());
  }
}

TEST(PartitionTest, SplitVariable_Mod_OffsetIsPartitionStrideIsCount) {
  absl::StatusOr<std::vector<proto::VariableSpec>> parts =
      SplitVariable(Spec("emb", {10, 4}), 3, proto::MOD);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  const int64_t want_rows[] = {4, 3, 3};
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ((*parts)[p].shape(0), want_rows[p]);
    EXPECT_EQ((*parts)[p].row_offset(), p);
    EXPECT_EQ((*parts)[p].row_stride(), 3);
    EXPECT_EQ((*parts)[p].routing(), proto::MOD);
  }
}

TEST(PartitionTest, SplitVariable_Hash_NoRowsAndCopiesAdmitAfter) {
  proto::VariableSpec spec = Spec("hash_emb", {0, 8});
  spec.set_admit_after(3);
  absl::StatusOr<std::vector<proto::VariableSpec>> parts = SplitVariable(spec, 4, proto::HASH);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 4u);
  for (int p = 0; p < 4; ++p) {
    const proto::VariableSpec& part = (*parts)[p];
    EXPECT_EQ(part.name(), "hash_emb/part_" + std::to_string(p));
    EXPECT_EQ(part.variable(), "hash_emb");
    ASSERT_EQ(part.shape_size(), 2);
    EXPECT_EQ(part.shape(0), 0);
    EXPECT_EQ(part.shape(1), 8);
    ASSERT_EQ(part.full_shape_size(), 2);
    EXPECT_EQ(part.full_shape(0), 0);
    EXPECT_EQ(part.full_shape(1), 8);
    EXPECT_EQ(part.partition(), p);
    EXPECT_EQ(part.num_partitions(), 4);
    EXPECT_EQ(part.routing(), proto::HASH);
    EXPECT_EQ(part.row_offset(), 0);
    EXPECT_EQ(part.row_stride(), 0);
    EXPECT_EQ(part.admit_after(), 3);
    EXPECT_EQ(part.initializer().seed(), 17u);
  }
}

TEST(PartitionTest, SplitVariable_OnePartitionNoRouting_ReturnsSpecUnchanged) {
  proto::VariableSpec spec = Spec("dense/kernel", {784, 256});
  absl::StatusOr<std::vector<proto::VariableSpec>> parts =
      SplitVariable(spec, 1, proto::ROUTING_NONE);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ((*parts)[0].SerializeAsString(), spec.SerializeAsString());
}

TEST(PartitionTest, SplitVariable_OnePartitionWithRouting_IsOnePartitionSpec) {
  absl::StatusOr<std::vector<proto::VariableSpec>> parts =
      SplitVariable(Spec("emb", {10, 4}), 1, proto::MOD);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ((*parts)[0].name(), "emb/part_0");
  EXPECT_EQ((*parts)[0].shape(0), 10);
  EXPECT_EQ((*parts)[0].row_offset(), 0);
  EXPECT_EQ((*parts)[0].row_stride(), 1);
}

TEST(PartitionTest, SplitVariable_BadInput_IsInvalidArgument) {
  const proto::VariableSpec spec = Spec("emb", {10, 4});
  EXPECT_EQ(SplitVariable(spec, 0, proto::DIV).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(spec, 11, proto::DIV).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(spec, 11, proto::MOD).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(spec, 2, proto::ROUTING_NONE).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(spec, 2, static_cast<proto::Routing>(42)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(Spec("scalar", {}), 1, proto::ROUTING_NONE).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(Spec("scalar", {}), 2, proto::MOD).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVariable(Spec("neg", {10, -4}), 2, proto::DIV).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PartitionTest, SplitVariable_RouteIdRoundTripsThroughOffsetAndStride) {
  for (proto::Routing routing : {proto::MOD, proto::DIV}) {
    ExpectRoundTrip(10, 3, routing);
    ExpectRoundTrip(7, 7, routing);
    ExpectRoundTrip(10, 1, routing);
    ExpectRoundTrip(1, 1, routing);
    for (int64_t n = 1; n <= 25; ++n) {
      for (int np = 1; np <= n; ++np) ExpectRoundTrip(n, np, routing);
    }
  }
}

TEST(PartitionTest, SplitDense_CutsOnlyWhatIsBiggerThanAPiece) {
  const proto::VariableSpec spec = Spec("w", {100, 10});  // 4000 bytes
  absl::StatusOr<std::vector<proto::VariableSpec>> pieces = SplitDense(spec, 1000);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 4u);
  int64_t rows = 0;
  for (const proto::VariableSpec& piece : *pieces) {
    EXPECT_EQ(piece.variable(), "w");
    EXPECT_EQ(piece.routing(), proto::DIV);
    EXPECT_EQ(piece.row_offset(), rows);
    EXPECT_LE(piece.shape(0) * 10 * 4, 1000);
    rows += piece.shape(0);
  }
  EXPECT_EQ(rows, 100);
  EXPECT_EQ(SplitDense(spec, 1001)->size(), 4u);  // 3 pieces cannot hold 4000 bytes
  EXPECT_EQ(SplitDense(spec, 4000)->size(), 1u);
  EXPECT_EQ(SplitDense(spec, 4000)->front().name(), "w");
  EXPECT_TRUE(SplitDense(spec, 4000)->front().variable().empty());
  EXPECT_EQ(SplitDense(spec, 0)->size(), 1u);
  EXPECT_EQ(SplitDense(Spec("scalar", {}), 1)->size(), 1u);
  // A row bigger than a piece: one piece per row.
  EXPECT_EQ(SplitDense(spec, 8)->size(), 100u);
}

}  // namespace
}  // namespace pst::common
