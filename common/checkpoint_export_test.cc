#include "common/checkpoint_export.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/partition.h"
#include "common/temp_dir_test.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;
using common::ShardRecord;

constexpr int kNumSlots = 2;  // adam: m, v
constexpr int kDim = 2;       // the hash table's row width

// The value of element i of tensor `salt` (distinct across tensors).
float Val(int salt, int64_t i) { return static_cast<float>(salt) * 1000.0f + 0.25f * i; }

std::vector<float> Tensor(int salt, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Val(salt, i);
  return v;
}

proto::VariableSpec Spec(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  return spec;
}

// The whole tensors a checkpoint was made from: values, then each slot.
struct Original {
  std::vector<int64_t> shape;
  std::vector<std::vector<float>> tensors;  // [0]: values, [1 + s]: slot s
};

// A hash table's rows: id -> values, then each slot, each kDim floats.
std::map<int64_t, std::vector<std::vector<float>>> HashRows() {
  std::map<int64_t, std::vector<std::vector<float>>> rows;
  const std::vector<int64_t> ids = {100, -5, 3, int64_t{1} << 40, 7, 42, -8};
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int t = 0; t <= kNumSlots; ++t) {
      rows[ids[i]].push_back({Val(50 + t, 2 * i), Val(50 + t, 2 * i + 1)});
    }
  }
  return rows;
}

// A test checkpoint: per ps, its records; and what they were made from.
struct FakeCheckpoint {
  std::vector<std::vector<ShardRecord>> ps;
  std::map<std::string, Original> originals;
  std::map<int64_t, std::vector<std::vector<float>>> hash_rows;  // of "hash_emb"
};

// A whole variable on ps `ps_index`.
void AddWhole(FakeCheckpoint& ckpt, const std::string& name, std::vector<int64_t> shape, int salt,
              int ps_index) {
  Original o;
  o.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int t = 0; t <= kNumSlots; ++t) o.tensors.push_back(Tensor(salt + t, n));
  ShardRecord r;
  r.spec = Spec(name, shape);
  r.version = 11;
  r.rows = shape[0];
  r.values = o.tensors[0];
  r.slots.assign(o.tensors.begin() + 1, o.tensors.end());
  ckpt.ps[ps_index].push_back(r);
  ckpt.originals[name] = o;
}

// A variable of `shape` split into `partitions` with `routing`; partition p
// goes to ps p % num_ps. Rows are routed with common::RouteId, not with the
// specs' row_offset/row_stride, so the test does not share the exporter's
// arithmetic.
void AddPartitioned(FakeCheckpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
                    int partitions, proto::Routing routing, int salt) {
  const std::vector<int64_t> sizes = common::PartitionSizes(shape[0], partitions);
  absl::StatusOr<std::vector<proto::VariableSpec>> specs =
      common::SplitVariable(Spec(name, shape), partitions, routing);
  ASSERT_TRUE(specs.ok()) << specs.status();
  Original o;
  o.shape = shape;
  int64_t dim = 1;
  for (size_t i = 1; i < shape.size(); ++i) dim *= shape[i];
  for (int t = 0; t <= kNumSlots; ++t) o.tensors.push_back(Tensor(salt + t, shape[0] * dim));
  std::vector<ShardRecord> parts(partitions);
  for (int p = 0; p < partitions; ++p) {
    parts[p].spec = (*specs)[p];
    parts[p].version = 5 + p;
    parts[p].rows = sizes[p];
    parts[p].values.assign(sizes[p] * dim, -1.0f);
    parts[p].slots.assign(kNumSlots, std::vector<float>(sizes[p] * dim, -1.0f));
  }
  for (int64_t g = 0; g < shape[0]; ++g) {
    absl::StatusOr<common::RowLocation> loc = common::RouteId(g, shape[0], partitions, routing);
    ASSERT_TRUE(loc.ok()) << loc.status();
    ShardRecord& r = parts[loc->partition];
    for (int64_t j = 0; j < dim; ++j) {
      r.values[loc->local_row * dim + j] = o.tensors[0][g * dim + j];
      for (int s = 0; s < kNumSlots; ++s) {
        r.slots[s][loc->local_row * dim + j] = o.tensors[1 + s][g * dim + j];
      }
    }
  }
  for (int p = 0; p < partitions; ++p) {
    ckpt.ps[p % ckpt.ps.size()].push_back(parts[p]);
  }
  ckpt.originals[name] = o;
}

// "hash_emb", [0, kDim], in two HASH partitions, partition p on ps p.
void AddHashTable(FakeCheckpoint& ckpt) {
  absl::StatusOr<std::vector<proto::VariableSpec>> specs =
      common::SplitVariable(Spec("hash_emb", {0, kDim}), 2, proto::HASH);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ckpt.hash_rows = HashRows();
  std::vector<ShardRecord> parts(2);
  for (int p = 0; p < 2; ++p) {
    parts[p].spec = (*specs)[p];
    parts[p].version = 3;
    parts[p].slots.resize(kNumSlots);
  }
  // Stored in descending id order: the export must sort them.
  for (auto it = ckpt.hash_rows.rbegin(); it != ckpt.hash_rows.rend(); ++it) {
    ShardRecord& r = parts[common::HashPartition(it->first, 2)];
    r.hash_ids.push_back(it->first);
    ++r.rows;
    r.values.insert(r.values.end(), it->second[0].begin(), it->second[0].end());
    for (int s = 0; s < kNumSlots; ++s) {
      r.slots[s].insert(r.slots[s].end(), it->second[1 + s].begin(), it->second[1 + s].end());
    }
  }
  ASSERT_GT(parts[0].rows, 0);
  ASSERT_GT(parts[1].rows, 0);
  ckpt.ps[0].push_back(parts[0]);
  ckpt.ps[1].push_back(parts[1]);
}

// Every kind of variable over two ps.
FakeCheckpoint SampleCheckpoint() {
  FakeCheckpoint ckpt;
  ckpt.ps.resize(2);
  AddWhole(ckpt, "dense/kernel", {3, 4}, 1, 0);
  AddWhole(ckpt, "dense/bias", {5}, 5, 1);
  AddPartitioned(ckpt, "emb_mod", {7, 3}, 3, proto::MOD, 10);
  AddPartitioned(ckpt, "emb_div", {5, 2}, 2, proto::DIV, 20);
  AddPartitioned(ckpt, "emb_div3d", {4, 2, 3}, 3, proto::DIV, 30);
  AddHashTable(ckpt);
  return ckpt;
}

// A safetensors file, parsed here independently of the exporter.
struct Parsed {
  uint64_t header_bytes = 0;
  nlohmann::json header;
  std::string data;

  const nlohmann::json& Entry(const std::string& name) const { return header.at(name); }
  std::vector<int64_t> Shape(const std::string& name) const {
    return Entry(name).at("shape").get<std::vector<int64_t>>();
  }
  template <typename T>
  std::vector<T> Values(const std::string& name) const {
    const auto offsets = Entry(name).at("data_offsets").get<std::vector<uint64_t>>();
    std::vector<T> out((offsets[1] - offsets[0]) / sizeof(T));
    std::memcpy(out.data(), data.data() + offsets[0], out.size() * sizeof(T));
    return out;
  }
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Parses `path` and checks the layout: header length, JSON, every tensor's
// size and alignment, offsets covering the data section without a gap.
void ParseSafetensors(const std::string& path, Parsed* out) {
  const std::string bytes = ReadBytes(path);
  ASSERT_GE(bytes.size(), 8u);
  std::memcpy(&out->header_bytes, bytes.data(), 8);
  ASSERT_LE(8 + out->header_bytes, bytes.size());
  const std::string header = bytes.substr(8, out->header_bytes);
  out->header = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(out->header.is_discarded()) << header;
  ASSERT_TRUE(out->header.is_object());
  out->data = bytes.substr(8 + out->header_bytes);

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : out->header.items()) {
    if (name == "__metadata__") continue;
    SCOPED_TRACE(name);
    const std::string dtype = entry.at("dtype").get<std::string>();
    ASSERT_TRUE(dtype == "F32" || dtype == "I64") << dtype;
    const uint64_t size = dtype == "F32" ? 4 : 8;
    uint64_t elements = 1;
    for (int64_t d : entry.at("shape").get<std::vector<int64_t>>()) elements *= d;
    const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    EXPECT_EQ(offsets[1] - offsets[0], elements * size);
    EXPECT_EQ((8 + out->header_bytes + offsets[0]) % size, 0u) << "misaligned";
    ranges.push_back({offsets[0], offsets[1]});
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t end = 0;
  for (const auto& [begin, stop] : ranges) {
    EXPECT_EQ(begin, end) << "gap or overlap in the data section";
    end = stop;
  }
  EXPECT_EQ(end, out->data.size());
}

class CheckpointExportTest : public TempDirTest {
 protected:
  CheckpointExportTest() : TempDirTest("checkpoint_export_test") {}

  // Writes `ckpt` as <root>/ckpt-<step> with a manifest whose plan lists
  // every record; returns the checkpoint directory.
  static std::string WriteCheckpoint(const std::string& root, int64_t step,
                                     const FakeCheckpoint& ckpt) {
    const std::string dir = (fs::path(root) / common::CheckpointDirName(step)).string();
    fs::create_directories(dir);
    proto::CheckpointManifest manifest;
    manifest.set_format_version(1);
    manifest.set_global_step(step);
    manifest.mutable_training()->mutable_optimizer()->set_name("adam");
    const int num_ps = static_cast<int>(ckpt.ps.size());
    manifest.mutable_plan()->set_num_ps(num_ps);
    for (int i = 0; i < num_ps; ++i) {
      proto::CheckpointShard* shard = manifest.add_shards();
      const std::string path = (fs::path(dir) / common::ShardFileName(i, num_ps)).string();
      const absl::Status status = common::WriteShardFile(path, ckpt.ps[i], shard);
      EXPECT_TRUE(status.ok()) << status;
      shard->set_ps_index(i);
      for (const ShardRecord& r : ckpt.ps[i]) {
        proto::PlacementPlan::Entry* entry = manifest.mutable_plan()->add_variables();
        *entry->mutable_spec() = r.spec;
        entry->set_ps_index(i);
      }
    }
    const absl::Status status = common::WriteManifest(dir, manifest);
    EXPECT_TRUE(status.ok()) << status;
    return dir;
  }

  static void FlipByte(const std::string& path, size_t pos) {
    std::string bytes = ReadBytes(path);
    ASSERT_LT(pos, bytes.size());
    bytes[pos] ^= 0x40;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

};

TEST_F(CheckpointExportTest, Export_EveryKindOfVariable_MatchesTheOriginalTensors) {
  const FakeCheckpoint ckpt = SampleCheckpoint();
  const std::string dir = WriteCheckpoint(Path("root"), 1200, ckpt);
  const std::string out = Path("model.safetensors");

  absl::StatusOr<ExportResult> result = ExportSafetensors(dir, out, ExportOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->checkpoint, dir);
  EXPECT_EQ(result->global_step, 1200);
  EXPECT_TRUE(result->skipped.empty());
  EXPECT_EQ(result->bytes, static_cast<int64_t>(fs::file_size(out)));
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  Parsed file;
  ASSERT_NO_FATAL_FAILURE(ParseSafetensors(out, &file));
  // Five variables plus the hash table's ids and values; no slots.
  EXPECT_EQ(result->tensors, 7);
  EXPECT_EQ(file.header.size(), 8u);  // and __metadata__
  for (const auto& [name, original] : ckpt.originals) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.header.contains(name));
    EXPECT_EQ(file.Entry(name).at("dtype"), "F32");
    EXPECT_EQ(file.Shape(name), original.shape);
    EXPECT_EQ(file.Values<float>(name), original.tensors[0]);
  }

  std::vector<int64_t> ids;
  std::vector<float> values;
  for (const auto& [id, row] : ckpt.hash_rows) {  // ascending ids
    ids.push_back(id);
    values.insert(values.end(), row[0].begin(), row[0].end());
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  EXPECT_EQ(file.Entry("hash_emb.ids").at("dtype"), "I64");
  EXPECT_EQ(file.Shape("hash_emb.ids"), std::vector<int64_t>({n}));
  EXPECT_EQ(file.Values<int64_t>("hash_emb.ids"), ids);
  EXPECT_EQ(file.Entry("hash_emb.values").at("dtype"), "F32");
  EXPECT_EQ(file.Shape("hash_emb.values"), std::vector<int64_t>({n, kDim}));
  EXPECT_EQ(file.Values<float>("hash_emb.values"), values);

  const nlohmann::json& metadata = file.header.at("__metadata__");
  EXPECT_EQ(metadata.at("format"), "pstrain");
  EXPECT_EQ(metadata.at("global_step"), "1200");
  EXPECT_EQ(metadata.at("checkpoint"), dir);
}

TEST_F(CheckpointExportTest, Export_IncludeSlots_ExportsEachSlotByName) {
  const FakeCheckpoint ckpt = SampleCheckpoint();
  const std::string dir = WriteCheckpoint(Path("root"), 7, ckpt);
  const std::string out = Path("model.safetensors");
  ExportOptions options;
  options.include_slots = true;

  absl::StatusOr<ExportResult> result = ExportSafetensors(dir, out, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tensors, 7 + 6 * kNumSlots);
  Parsed file;
  ASSERT_NO_FATAL_FAILURE(ParseSafetensors(out, &file));
  const char* kSlots[kNumSlots] = {"m", "v"};  // adam's
  for (const auto& [name, original] : ckpt.originals) {
    for (int s = 0; s < kNumSlots; ++s) {
      const std::string slot = absl::StrCat(name, "/", kSlots[s]);
      SCOPED_TRACE(slot);
      ASSERT_TRUE(file.header.contains(slot));
      EXPECT_EQ(file.Shape(slot), original.shape);
      EXPECT_EQ(file.Values<float>(slot), original.tensors[1 + s]);
    }
  }
  for (int s = 0; s < kNumSlots; ++s) {
    std::vector<float> want;
    for (const auto& [id, row] : ckpt.hash_rows) {
      want.insert(want.end(), row[1 + s].begin(), row[1 + s].end());
    }
    const std::string slot = absl::StrCat("hash_emb/", kSlots[s]);
    SCOPED_TRACE(slot);
    ASSERT_TRUE(file.header.contains(slot));
    EXPECT_EQ(file.Values<float>(slot), want);
  }
}

TEST_F(CheckpointExportTest, Export_Header_IsPaddedTo8BytesAndIdsComeFirst) {
  const std::string dir = WriteCheckpoint(Path("root"), 1, SampleCheckpoint());
  const std::string out = Path("model.safetensors");
  ASSERT_TRUE(ExportSafetensors(dir, out, ExportOptions()).ok());
  Parsed file;
  ASSERT_NO_FATAL_FAILURE(ParseSafetensors(out, &file));
  EXPECT_EQ(file.header_bytes % 8, 0u);
  const std::string bytes = ReadBytes(out);
  EXPECT_EQ(bytes[8], '{');
  // The only I64 tensor is laid out first, so it is 8-byte aligned.
  EXPECT_EQ(file.Entry("hash_emb.ids").at("data_offsets")[0], 0);
}

TEST_F(CheckpointExportTest, Export_CorruptShard_IsDataLossAndWritesNothing) {
  const std::string dir = WriteCheckpoint(Path("root"), 1, SampleCheckpoint());
  const std::string shard = (fs::path(dir) / common::ShardFileName(1, 2)).string();
  ASSERT_NO_FATAL_FAILURE(FlipByte(shard, fs::file_size(shard) / 2));
  const std::string out = Path("model.safetensors");

  absl::StatusOr<ExportResult> result = ExportSafetensors(dir, out, ExportOptions());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_NE(result.status().message().find(shard), std::string::npos) << result.status();
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST_F(CheckpointExportTest, Export_CorruptShard_LeavesAnExistingOutputUntouched) {
  const std::string dir = WriteCheckpoint(Path("root"), 1, SampleCheckpoint());
  const std::string shard = (fs::path(dir) / common::ShardFileName(0, 2)).string();
  ASSERT_NO_FATAL_FAILURE(FlipByte(shard, 20));
  const std::string out = Path("model.safetensors");
  std::ofstream(out) << "previous export";

  EXPECT_EQ(ExportSafetensors(dir, out, ExportOptions()).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadBytes(out), "previous export");
}

TEST_F(CheckpointExportTest, Export_Root_PicksTheNewestValidCheckpoint) {
  const std::string root = Path("root");
  WriteCheckpoint(root, 100, SampleCheckpoint());
  const std::string newest = WriteCheckpoint(root, 200, SampleCheckpoint());
  const std::string out = Path("model.safetensors");

  absl::StatusOr<ExportResult> result = ExportSafetensors(root, out, ExportOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->global_step, 200);
  EXPECT_EQ(result->checkpoint, newest);

  // A corrupt newest checkpoint is passed over, and said so.
  const std::string shard = (fs::path(newest) / common::ShardFileName(0, 2)).string();
  ASSERT_NO_FATAL_FAILURE(FlipByte(shard, fs::file_size(shard) - 20));
  result = ExportSafetensors(root, out, ExportOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->global_step, 100);
  ASSERT_EQ(result->skipped.size(), 1u);
  EXPECT_NE(result->skipped[0].find(newest), std::string::npos) << result->skipped[0];
  Parsed file;
  ASSERT_NO_FATAL_FAILURE(ParseSafetensors(out, &file));
  EXPECT_EQ(file.header.at("__metadata__").at("global_step"), "100");
}

TEST_F(CheckpointExportTest, Export_RootWithoutValidCheckpoint_IsDataLoss) {
  const std::string root = Path("root");
  const std::string dir = WriteCheckpoint(root, 100, SampleCheckpoint());
  const std::string shard = (fs::path(dir) / common::ShardFileName(1, 2)).string();
  ASSERT_NO_FATAL_FAILURE(FlipByte(shard, 30));
  const std::string out = Path("model.safetensors");
  absl::StatusOr<ExportResult> result = ExportSafetensors(root, out, ExportOptions());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CheckpointExportTest, Export_NoCheckpoint_IsNotFound) {
  const std::string out = Path("model.safetensors");
  EXPECT_EQ(ExportSafetensors(dir_, out, ExportOptions()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ExportSafetensors(Path("missing"), out, ExportOptions()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CheckpointExportTest, Export_MissingPartition_IsDataLossNamingTheVariable) {
  FakeCheckpoint ckpt = SampleCheckpoint();
  // Drop emb_mod's partition 1 (on ps 1) from its shard and from the plan.
  auto& records = ckpt.ps[1];
  const size_t before = records.size();
  records.erase(
      std::remove_if(records.begin(), records.end(),
                     [](const ShardRecord& r) { return r.spec.name() == "emb_mod/part_1"; }),
      records.end());
  ASSERT_EQ(records.size(), before - 1);
  const std::string dir = WriteCheckpoint(Path("root"), 1, ckpt);
  const std::string out = Path("model.safetensors");

  absl::StatusOr<ExportResult> result = ExportSafetensors(dir, out, ExportOptions());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_NE(result.status().message().find("'emb_mod'"), std::string::npos) << result.status();
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CheckpointExportTest, Export_HashIdTwice_IsDataLoss) {
  FakeCheckpoint ckpt = SampleCheckpoint();
  // Give partition 1 a copy of one of partition 0's ids.
  ShardRecord* part0 = nullptr;
  ShardRecord* part1 = nullptr;
  for (auto& shard : ckpt.ps) {
    for (ShardRecord& r : shard) {
      if (r.spec.name() == "hash_emb/part_0") part0 = &r;
      if (r.spec.name() == "hash_emb/part_1") part1 = &r;
    }
  }
  ASSERT_NE(part0, nullptr);
  ASSERT_NE(part1, nullptr);
  part1->hash_ids.push_back(part0->hash_ids[0]);
  ++part1->rows;
  part1->values.insert(part1->values.end(), kDim, 0.0f);
  for (auto& slot : part1->slots) slot.insert(slot.end(), kDim, 0.0f);
  const std::string dir = WriteCheckpoint(Path("root"), 1, ckpt);

  absl::StatusOr<ExportResult> result =
      ExportSafetensors(dir, Path("model.safetensors"), ExportOptions());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_NE(result.status().message().find("hash_emb"), std::string::npos) << result.status();
}

TEST_F(CheckpointExportTest, Export_NameClash_IsInvalidArgument) {
  FakeCheckpoint ckpt = SampleCheckpoint();
  AddWhole(ckpt, "hash_emb.ids", {2}, 90, 0);
  const std::string dir = WriteCheckpoint(Path("root"), 1, ckpt);
  const std::string out = Path("model.safetensors");
  absl::StatusOr<ExportResult> result = ExportSafetensors(dir, out, ExportOptions());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace pst::common
