// Streaming shard files both ways: WriteShardFile (common/shard_writer.cc)
// writes a record whose rows come from a ShardRowStream to the same bytes
// as the same rows held, and a stream that breaks its word leaves no file;
// ShardReader::ReadRows reads a record Next did not keep in chunks, every
// checksum checked again.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_layout.h"
#include "common/shard_reader.h"
#include "common/temp_dir_test.h"
#include "gtest/gtest.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

// One hash row as a table holds it: values then each slot.
struct Row {
  int64_t id;
  std::vector<float> floats;
  int64_t last;
  double count;
};

// Streams `rows`; `count_extra` is added to what Count says, and `fail_at`
// makes ForEach fail at that row.
class VectorStream : public ShardRowStream {
 public:
  explicit VectorStream(std::vector<Row> rows, int64_t count_extra = 0, int64_t fail_at = -1)
      : rows_(std::move(rows)), count_extra_(count_extra), fail_at_(fail_at) {}
  absl::StatusOr<int64_t> Count() const override {
    return static_cast<int64_t>(rows_.size()) + count_extra_;
  }
  absl::Status ForEach(RowFn fn) const override {
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (static_cast<int64_t>(i) == fail_at_) return absl::DataLossError("disk read failed");
      const Row& r = rows_[i];
      absl::Status s = fn(r.id, r.floats, r.last, r.count);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<Row> rows_;
  int64_t count_extra_;
  int64_t fail_at_;
};

proto::VariableSpec HashSpec(int64_t dim) {
  proto::VariableSpec spec;
  spec.set_name("emb/part_1");
  spec.set_variable("emb");
  spec.set_dtype(proto::DT_FLOAT32);
  spec.add_shape(0);
  spec.add_shape(dim);
  spec.set_routing(proto::HASH);
  spec.set_partition(1);
  spec.set_num_partitions(2);
  spec.mutable_initializer()->set_kind(proto::Initializer::GLOROT_UNIFORM);
  return spec;
}

proto::VariableSpec DenseSpec(int64_t rows, int64_t dim) {
  proto::VariableSpec spec;
  spec.set_name("dense/kernel");
  spec.set_dtype(proto::DT_FLOAT32);
  spec.add_shape(rows);
  spec.add_shape(dim);
  spec.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  return spec;
}

// `n` rows of `dim` values and `slots` slots each, every float distinct.
std::vector<Row> MakeRows(int64_t n, int64_t dim, int slots) {
  std::vector<Row> rows;
  for (int64_t i = 0; i < n; ++i) {
    Row r{(i * 7919) ^ (i % 3 == 0 ? -1 : 1) * (i << 33), {}, i * 3 - 5, 0.5 * i};
    for (int64_t k = 0; k < dim * (1 + slots); ++k) r.floats.push_back(i * 1000.0f + k * 0.25f);
    rows.push_back(std::move(r));
  }
  return rows;
}

// The record that holds `rows` itself.
ShardRecord Held(const proto::VariableSpec& spec, const std::vector<Row>& rows, int64_t dim,
                 int slots) {
  ShardRecord r;
  r.spec = spec;
  r.version = 41;
  r.rows = static_cast<int64_t>(rows.size());
  r.slots.resize(slots);
  for (const Row& row : rows) {
    r.hash_ids.push_back(row.id);
    r.row_last.push_back(row.last);
    r.row_count.push_back(row.count);
    r.values.insert(r.values.end(), row.floats.begin(), row.floats.begin() + dim);
    for (int s = 0; s < slots; ++s) {
      r.slots[s].insert(r.slots[s].end(), row.floats.begin() + (s + 1) * dim,
                        row.floats.begin() + (s + 2) * dim);
    }
  }
  r.admission = "admission bytes";
  return r;
}

ShardRecord Streamed(const proto::VariableSpec& spec, std::shared_ptr<const ShardRowStream> stream,
                     int slots) {
  ShardRecord r;
  r.spec = spec;
  r.version = 41;
  r.stream = std::move(stream);
  r.stream_slots = slots;
  r.admission = "admission bytes";
  return r;
}

ShardRecord Dense() {
  ShardRecord r;
  r.spec = DenseSpec(3, 2);
  r.version = 7;
  r.rows = 3;
  r.values = {1, 2, 3, 4, 5, 6};
  r.slots = {{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}};
  return r;
}

class ShardWriterTest : public TempDirTest {
 protected:
  ShardWriterTest() : TempDirTest("shard_writer_test") {}

  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  int Files() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
};

// Rows many times the writer's 1 MiB buffers, so that buffered appends,
// flushes and the checksums combined across them are all exercised.
TEST_F(ShardWriterTest, StreamedRows_WriteTheBytesOfTheSameRowsHeld) {
  for (const auto& [n, dim, slots] :
       std::vector<std::tuple<int64_t, int64_t, int>>{{0, 4, 1}, {1, 3, 0}, {70000, 8, 2}}) {
    SCOPED_TRACE(absl::StrCat(n, " rows of ", dim, " with ", slots, " slots"));
    const std::vector<Row> rows = MakeRows(n, dim, slots);
    proto::CheckpointShard held_shard, streamed_shard;
    ASSERT_TRUE(WriteShardFile(Path("held"), {Dense(), Held(HashSpec(dim), rows, dim, slots)},
                               &held_shard)
                    .ok());
    absl::Status s = WriteShardFile(
        Path("streamed"),
        {Dense(), Streamed(HashSpec(dim), std::make_shared<VectorStream>(rows), slots)},
        &streamed_shard);
    ASSERT_TRUE(s.ok()) << s;
    const std::string held = Bytes(Path("held")), streamed = Bytes(Path("streamed"));
    EXPECT_EQ(held.size(), static_cast<size_t>(held_shard.bytes()));
    EXPECT_TRUE(held == streamed) << held.size() << " bytes against " << streamed.size();
    EXPECT_EQ(streamed_shard.bytes(), held_shard.bytes());
    // The manifest's crc32 is the whole file's.
    EXPECT_EQ(streamed_shard.crc32(), ShardCrc32(streamed.data(), streamed.size()));
    EXPECT_EQ(held_shard.crc32(), ShardCrc32(held.data(), held.size()));

    // And it reads back, each checksum checked, as the rows streamed.
    absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(Path("streamed"));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 2u);
    const ShardRecord& r = (*got)[1];
    ASSERT_EQ(r.rows, n);
    ASSERT_EQ(r.slots.size(), static_cast<size_t>(slots));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(r.hash_ids[i], rows[i].id);
      ASSERT_EQ(r.row_last[i], rows[i].last);
      ASSERT_EQ(r.row_count[i], rows[i].count);
      ASSERT_EQ(r.values[i * dim + dim - 1], rows[i].floats[dim - 1]);
      if (slots > 0) {
        ASSERT_EQ(r.slots[slots - 1][i * dim], rows[i].floats[slots * dim]);
      }
    }
    EXPECT_EQ(r.admission, "admission bytes");
  }
}

TEST_F(ShardWriterTest, StreamThatGivesOtherThanItCounted_IsAnErrorAndLeavesNoFile) {
  for (int64_t extra : {1, -1}) {
    SCOPED_TRACE(extra);
    absl::Status s = WriteShardFile(
        Path("shard"),
        {Streamed(HashSpec(4), std::make_shared<VectorStream>(MakeRows(10, 4, 1), extra), 1)},
        nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find("emb/part_1"), std::string::npos) << s;
    EXPECT_NE(s.message().find("counted"), std::string::npos) << s;
    EXPECT_EQ(Files(), 0);  // no temp file either
  }
}

TEST_F(ShardWriterTest, StreamError_IsReturnedAndLeavesNoFile) {
  absl::Status s = WriteShardFile(
      Path("shard"),
      {Dense(), Streamed(HashSpec(4), std::make_shared<VectorStream>(MakeRows(10, 4, 1), 0, 6), 1)},
      nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(s.message(), "disk read failed");
  EXPECT_EQ(Files(), 0);
}

TEST_F(ShardWriterTest, RowOfTheWrongWidth_IsAnError) {
  std::vector<Row> rows = MakeRows(3, 4, 1);
  rows[2].floats.pop_back();
  absl::Status s = WriteShardFile(
      Path("shard"), {Streamed(HashSpec(4), std::make_shared<VectorStream>(rows), 1)}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("a row of 7 floats, expected 8"), std::string::npos) << s;
  EXPECT_EQ(Files(), 0);
}

TEST_F(ShardWriterTest, RecordBothStreamedAndHeld_IsRefused) {
  ShardRecord r = Streamed(HashSpec(4), std::make_shared<VectorStream>(MakeRows(3, 4, 0)), 0);
  r.rows = 1;
  r.values = {1, 2, 3, 4};
  r.hash_ids = {5};
  absl::Status s = WriteShardFile(Path("shard"), {r}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("both streamed and held"), std::string::npos) << s;

  ShardRecord dense = Dense();
  dense.stream = std::make_shared<VectorStream>(MakeRows(3, 2, 0));
  dense.values.clear();
  dense.slots.clear();
  dense.rows = 0;
  s = WriteShardFile(Path("shard"), {dense}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not hashed"), std::string::npos) << s;
  EXPECT_EQ(Files(), 0);
}

TEST_F(ShardWriterTest, ReadRows_GivesARecordNotKept_InChunks_AsWritten) {
  constexpr int64_t kDim = 8;
  const std::vector<Row> rows = MakeRows(70000, kDim, 2);  // several chunks
  ASSERT_TRUE(WriteShardFile(Path("shard"),
                             {Dense(), Streamed(HashSpec(kDim), std::make_shared<VectorStream>(rows),
                                                2)},
                             nullptr)
                  .ok());
  absl::StatusOr<std::unique_ptr<ShardReader>> reader = ShardReader::Open(Path("shard"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto not_hash = [](const proto::VariableSpec& spec) { return spec.routing() != proto::HASH; };
  ShardRecord dense, table;
  ShardRowsLayout layout;
  ASSERT_TRUE((*reader)->Next(&dense, not_hash, &layout).value());
  EXPECT_EQ(dense.values.size(), 6u);
  EXPECT_TRUE(layout.offsets.empty()) << "a record kept is not laid out";
  ASSERT_TRUE((*reader)->Next(&table, not_hash, &layout).value());
  EXPECT_TRUE(table.values.empty() && table.hash_ids.empty());
  EXPECT_EQ(table.rows, 70000);
  EXPECT_EQ(table.admission, "admission bytes") << "kept: a restore needs it";
  EXPECT_EQ(layout.dim, kDim);
  EXPECT_TRUE(layout.entries);
  ShardRecord end;
  ASSERT_FALSE((*reader)->Next(&end, not_hash).value());

  int64_t next = 0;
  int chunks = 0;
  absl::Status s = (*reader)->ReadRows(layout, [&](const ShardRowChunk& c) {
    ++chunks;
    EXPECT_EQ(c.first, next);
    for (int64_t k = 0; k < c.n; ++k) {
      const Row& want = rows[c.first + k];
      EXPECT_EQ(c.ids[k], want.id);
      EXPECT_EQ(c.last[k], want.last);
      EXPECT_EQ(c.count[k], want.count);
      EXPECT_EQ(c.values[k * kDim + 3], want.floats[3]);
      EXPECT_EQ(c.slots[1][k * kDim + 7], want.floats[2 * kDim + 7]);
    }
    next += c.n;
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(next, 70000);
  EXPECT_GT(chunks, 1);
}

TEST_F(ShardWriterTest, ReadRows_FileChangedSinceNext_IsDataLoss) {
  const std::vector<Row> rows = MakeRows(1000, 4, 1);
  ASSERT_TRUE(WriteShardFile(Path("shard"),
                             {Streamed(HashSpec(4), std::make_shared<VectorStream>(rows), 1)},
                             nullptr)
                  .ok());
  absl::StatusOr<std::unique_ptr<ShardReader>> reader = ShardReader::Open(Path("shard"));
  ASSERT_TRUE(reader.ok());
  ShardRecord table;
  ShardRowsLayout layout;
  auto none = [](const proto::VariableSpec&) { return false; };
  ASSERT_TRUE((*reader)->Next(&table, none, &layout).value());
  // A byte of the ids flipped after Next checked them.
  {
    std::fstream f(Path("shard"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(layout.offsets[2] + 100));
    f.put('\x5a');
  }
  absl::Status s = (*reader)->ReadRows(layout, [](const ShardRowChunk&) { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(Path("shard")), std::string::npos) << s;
}

}  // namespace
}  // namespace pst::common
