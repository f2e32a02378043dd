#include "common/checkpoint_format.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_test_records.h"
#include "common/shard_reader.h"
#include "common/status_macros.h"
#include "common/temp_dir_test.h"
#include "gtest/gtest.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

class CheckpointFormatTest : public TempDirTest {
 protected:
  CheckpointFormatTest() : TempDirTest("checkpoint_format_test") {}

  // Expects DataLoss naming `path` from reading it as a shard file.
  static void ExpectDataLoss(const std::string& path, const std::string& context) {
    absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
    ASSERT_FALSE(got.ok()) << context;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << context << ": " << got.status();
    EXPECT_TRUE(Contains(std::string(got.status().message()), path)) << context;
  }
};

void ExpectSameRecords(const std::vector<ShardRecord>& got, const std::vector<ShardRecord>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].spec.name());
    EXPECT_EQ(got[i].spec.SerializeAsString(), want[i].spec.SerializeAsString());
    EXPECT_EQ(got[i].version, want[i].version);
    EXPECT_EQ(got[i].rows, want[i].rows);
    EXPECT_EQ(got[i].values, want[i].values);
    EXPECT_EQ(got[i].slots, want[i].slots);
    EXPECT_EQ(got[i].hash_ids, want[i].hash_ids);
    EXPECT_EQ(got[i].row_last, want[i].row_last);
    EXPECT_EQ(got[i].row_count, want[i].row_count);
    EXPECT_EQ(got[i].admission, want[i].admission);
    EXPECT_EQ(got[i].removed_ids, want[i].removed_ids);
  }
}

TEST_F(CheckpointFormatTest, Names) {
  EXPECT_EQ(CheckpointDirName(1200), "ckpt-000000001200");
  EXPECT_EQ(CheckpointDirName(0), "ckpt-000000000000");
  EXPECT_EQ(ShardFileName(1, 3), "shard-1-of-3.pst");
}

TEST_F(CheckpointFormatTest, WriteThenRead_RoundTripsEveryField) {
  const std::vector<ShardRecord> records = SampleRecords();
  const std::string path = Path(ShardFileName(0, 2));
  proto::CheckpointShard shard;
  ASSERT_TRUE(WriteShardFile(path, records, &shard).ok());
  EXPECT_EQ(shard.file(), "shard-0-of-2.pst");
  EXPECT_EQ(shard.bytes(), static_cast<int64_t>(fs::file_size(path)));
  EXPECT_NE(shard.crc32(), 0u);

  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameRecords(*got, records);
  EXPECT_EQ((*got)[3].spec.routing(), proto::MOD);
  EXPECT_EQ((*got)[3].spec.row_stride(), 3);
}

TEST_F(CheckpointFormatTest, WriteThenRead_TableExtras_RoundTrip) {
  std::vector<ShardRecord> records = SampleRecords();
  ShardRecord& hash = records[2];
  hash.row_last = {3, 9, -1, 7};
  hash.row_count = {1.5, 0.25, 2, 1e9};
  hash.admission = std::string("\x01\x00counts\xff", 9);
  ShardRecord only_admission = hash;
  only_admission.spec.set_name("emb/part_1");
  only_admission.spec.set_partition(1);
  only_admission.row_last.clear();
  only_admission.row_count.clear();
  records.push_back(only_admission);
  const std::string path = Path("extras.pst");
  ASSERT_TRUE(WriteShardFile(path, records, nullptr).ok());
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameRecords(*got, records);

  // Entries that do not match the rows are refused, nothing written.
  records[2].row_count.pop_back();
  EXPECT_EQ(WriteShardFile(Path("bad.pst"), records, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(Path("bad.pst")));
}

// An incremental checkpoint's hash record: rows changed, and ids removed.
TEST_F(CheckpointFormatTest, WriteThenRead_RemovedIds_RoundTrip_OnlyForHashRecords) {
  std::vector<ShardRecord> records = SampleRecords();
  records[2].removed_ids = {11, -7, int64_t{1} << 50};
  ShardRecord only_removed = records[2];
  only_removed.spec.set_name("emb/part_1");
  only_removed.rows = 0;
  only_removed.values.clear();
  only_removed.slots = {{}};
  only_removed.hash_ids.clear();
  records.push_back(only_removed);
  const std::string path = Path("removed.pst");
  ASSERT_TRUE(WriteShardFile(path, records, nullptr).ok());
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameRecords(*got, records);

  // A record not kept still gives its removed ids (a streamed restore
  // removes them too).
  absl::StatusOr<std::unique_ptr<ShardReader>> reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok());
  ShardRecord record;
  ShardRowsLayout layout;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(*(*reader)->Next(
        &record, [](const proto::VariableSpec&) { return false; }, &layout));
  }
  EXPECT_EQ(record.removed_ids, records[2].removed_ids);
  EXPECT_TRUE(record.values.empty());

  // Ids removed from a dense variable are refused, nothing written.
  records[0].removed_ids = {1};
  const absl::Status refused = WriteShardFile(Path("bad.pst"), records, nullptr);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(Contains(std::string(refused.message()), "dense_0/kernel"));
  EXPECT_FALSE(fs::exists(Path("bad.pst")));
}

TEST_F(CheckpointFormatTest, ReadShard_TableExtrasCorrupt_IsDataLoss) {
  std::vector<ShardRecord> records = SampleRecords();
  records[2].admission = std::string(64, 'a');
  records.resize(3);  // the hash record last: its admission ends the file
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, records, nullptr).ok());
  std::string bytes = ReadBytes(path);
  // The admission payload's last byte: before its crc, the record's, the
  // trailer.
  bytes[bytes.size() - 8 - 4 - 4 - 1] ^= 0x20;
  WriteBytes(path, bytes);
  ExpectDataLoss(path, "admission byte flipped");
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  EXPECT_TRUE(Contains(std::string(got.status().message()), "admission")) << got.status();
}

TEST_F(CheckpointFormatTest, WriteThenRead_NoRecords) {
  const std::string path = Path("empty.pst");
  proto::CheckpointShard shard;
  ASSERT_TRUE(WriteShardFile(path, {}, &shard).ok());
  EXPECT_EQ(shard.bytes(), 8 + 4 + 8);
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
}

TEST_F(CheckpointFormatTest, WriteShardFile_LeavesNoTmpFile) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  // Overwriting works and is atomic too.
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(entry.path().filename().string(), "shard-0-of-1.pst");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(CheckpointFormatTest, WriteShardFile_MissingDirectory_IsInternalNamingThePath) {
  const std::string path = Path("no/such/dir/shard-0-of-1.pst");
  absl::Status s = WriteShardFile(path, SampleRecords(), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(Contains(std::string(s.message()), path));
}

TEST_F(CheckpointFormatTest, WriteShardFile_InconsistentRecord_IsRejected) {
  std::vector<ShardRecord> records = SampleRecords();
  records[0].slots[1].pop_back();
  absl::Status s = WriteShardFile(Path("bad.pst"), records, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(std::string(s.message()), "dense_0/kernel"));
  EXPECT_FALSE(fs::exists(Path("bad.pst")));
}

TEST_F(CheckpointFormatTest, ReadShard_MissingFile_IsNotFound) {
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(Path("absent.pst"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
}

TEST_F(CheckpointFormatTest, ReadShard_FlippedByte_IsDataLossNamingTheFile) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  const std::string good = ReadBytes(path);
  // Every single byte: magic, counts, headers, payloads, crcs, trailer.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    WriteBytes(path, bad);
    ExpectDataLoss(path, absl::StrCat("byte ", i, " flipped"));
  }
}

// Every record through ShardReader with `keep`, or its error.
absl::StatusOr<std::vector<ShardRecord>> ReadKeeping(const std::string& path,
                                                     const ShardReader::KeepTensors& keep) {
  PST_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> reader, ShardReader::Open(path));
  std::vector<ShardRecord> records;
  while (true) {
    ShardRecord r;
    PST_ASSIGN_OR_RETURN(const bool more, reader->Next(&r, keep));
    if (!more) return records;
    records.push_back(std::move(r));
  }
}

TEST_F(CheckpointFormatTest, ShardReader_RecordsNotKept_ComeWithoutTensors_AndAreStillChecked) {
  const std::string path = Path("shard-0-of-1.pst");
  const std::vector<ShardRecord> want = SampleRecords();
  ASSERT_TRUE(WriteShardFile(path, want, nullptr).ok());
  auto only_bias = [](const proto::VariableSpec& spec) { return spec.name() == "dense_0/bias"; };
  absl::StatusOr<std::vector<ShardRecord>> got = ReadKeeping(path, only_bias);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const ShardRecord& g = (*got)[i];
    SCOPED_TRACE(want[i].spec.name());
    EXPECT_EQ(g.spec.SerializeAsString(), want[i].spec.SerializeAsString());
    EXPECT_EQ(g.version, want[i].version);
    EXPECT_EQ(g.rows, want[i].rows);
    ASSERT_EQ(g.slots.size(), want[i].slots.size());
    if (only_bias(g.spec)) {
      EXPECT_EQ(g.values, want[i].values);
      continue;
    }
    EXPECT_TRUE(g.values.empty());
    EXPECT_TRUE(g.hash_ids.empty());
    for (const std::vector<float>& slot : g.slots) EXPECT_TRUE(slot.empty());
  }
  // A flipped byte anywhere is caught whether or not the record is kept.
  const std::string good = ReadBytes(path);
  auto none = [](const proto::VariableSpec&) { return false; };
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    WriteBytes(path, bad);
    EXPECT_EQ(ReadKeeping(path, none).status().code(), absl::StatusCode::kDataLoss)
        << "byte " << i << " flipped";
  }
}

TEST_F(CheckpointFormatTest, ReadShard_FlippedPayloadByte_NamesTheVariable) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  std::string bytes = ReadBytes(path);
  // Find the bias record's values by content: the first float of Ramp(5, 0.25f).
  const float marker = 0.25f;
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&marker), 4));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = static_cast<char>(bytes[at + 1] ^ 1);
  WriteBytes(path, bytes);
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(std::string(got.status().message()), "dense_0/bias"));
  EXPECT_TRUE(Contains(std::string(got.status().message()), path));
}

TEST_F(CheckpointFormatTest, ReadShard_Truncated_IsDataLossAtEveryCut) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  const std::string good = ReadBytes(path);
  ASSERT_GT(good.size(), 9u);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    WriteBytes(path, good.substr(0, cut));
    ExpectDataLoss(path, absl::StrCat("cut at ", cut, " of ", good.size()));
  }
  // Explicitly: just before the trailer and one byte short of the end.
  WriteBytes(path, good.substr(0, good.size() - 8));
  ExpectDataLoss(path, "no trailer");
  WriteBytes(path, good.substr(0, good.size() - 1));
  ExpectDataLoss(path, "last byte missing");
}

TEST_F(CheckpointFormatTest, ReadShard_BadMagic_IsDataLoss) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  std::string bytes = ReadBytes(path);
  bytes.replace(0, 8, "PSTSHRD9");
  WriteBytes(path, bytes);
  ExpectDataLoss(path, "bad magic");
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  EXPECT_TRUE(Contains(std::string(got.status().message()), "magic"));
}

TEST_F(CheckpointFormatTest, ReadShard_BadTrailer_IsDataLoss) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  std::string bytes = ReadBytes(path);
  bytes.replace(bytes.size() - 8, 8, "PSTEND02");
  WriteBytes(path, bytes);
  ExpectDataLoss(path, "bad trailer");
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  EXPECT_TRUE(Contains(std::string(got.status().message()), "trailer"));
}

TEST_F(CheckpointFormatTest, ReadShard_TrailingGarbage_IsDataLoss) {
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, SampleRecords(), nullptr).ok());
  const std::string good = ReadBytes(path);
  WriteBytes(path, good + "x");
  ExpectDataLoss(path, "one extra byte");
  WriteBytes(path, good + good);
  ExpectDataLoss(path, "file twice");
}

TEST_F(CheckpointFormatTest, ReadShard_HugeLengths_AreDataLossWithoutHugeAllocations) {
  const std::string path = Path("shard-0-of-1.pst");
  ShardRecord r;
  r.spec = DenseSpec("v", {2});
  r.rows = 2;
  r.values = {1.0f, 2.0f};
  ASSERT_TRUE(WriteShardFile(path, {r}, nullptr).ok());
  const std::string good = ReadBytes(path);
  const std::string header = r.spec.SerializeAsString();
  // Offsets of the length fields.
  const size_t record_count_at = 8;
  const size_t header_bytes_at = 12;
  const size_t tensor_count_at = header_bytes_at + 4 + header.size() + 16;
  const size_t payload_bytes_at = tensor_count_at + 4;
  // The tensor, its crc, the table extras mask, the record crc, the trailer.
  ASSERT_EQ(good.size(), payload_bytes_at + 8 + 8 + 4 + 4 + 4 + 8);
  auto patch = [&](size_t at, const void* v, size_t n) {
    std::string bad = good;
    std::memcpy(bad.data() + at, v, n);
    WriteBytes(path, bad);
  };
  const uint32_t big32 = 0xffffffffu;
  const uint64_t big64 = 0xffffffffffffff00ull;
  patch(record_count_at, &big32, 4);
  ExpectDataLoss(path, "huge record count");
  patch(header_bytes_at, &big32, 4);
  ExpectDataLoss(path, "huge header length");
  patch(tensor_count_at, &big32, 4);
  ExpectDataLoss(path, "huge tensor count");
  patch(payload_bytes_at, &big64, 8);
  ExpectDataLoss(path, "huge payload length");
  const int64_t huge_rows = INT64_MAX / 2;
  patch(header_bytes_at + 4 + header.size() + 8, &huge_rows, 8);
  ExpectDataLoss(path, "huge row count");
}

// An encoder written from the header's description of the format, to build
// files the writer refuses to make (sizes that disagree with the spec) with
// valid checksums.
class RawShard {
 public:
  // Version 2 records carry a table extras mask (0 here) after their
  // tensors; version 1 records do not.
  explicit RawShard(int version = 2)
      : bytes_(version == 1 ? "PSTSHRD1" : "PSTSHRD2"), version_(version) {}

  // One record; `payloads` are the tensors' bytes, in order.
  void AddRecord(const proto::VariableSpec& spec, int64_t version, int64_t rows,
                 const std::vector<std::string>& payloads) {
    std::string r;
    const std::string header = spec.SerializeAsString();
    U32(static_cast<uint32_t>(header.size()), &r);
    r += header;
    U64(static_cast<uint64_t>(version), &r);
    U64(static_cast<uint64_t>(rows), &r);
    U32(static_cast<uint32_t>(payloads.size()), &r);
    for (const std::string& p : payloads) {
      U64(p.size(), &r);
      r += p;
      U32(Crc(p), &r);
    }
    if (version_ >= 2) U32(0, &r);  // no table extras
    U32(Crc(r), &r);
    records_ += r;
    ++count_;
  }
  std::string Bytes() const {
    std::string out = bytes_;
    U32(count_, &out);
    return out + records_ + "PSTEND01";
  }

  static std::string Floats(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  static std::string Ids(const std::vector<int64_t>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }

 private:
  static uint32_t Crc(const std::string& s) {
    return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                       reinterpret_cast<const Bytef*>(s.data()),
                                       static_cast<uInt>(s.size())));
  }
  static void U32(uint32_t v, std::string* out) {
    for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
  }
  static void U64(uint64_t v, std::string* out) {
    for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
  }

  std::string bytes_;
  int version_;
  std::string records_;
  uint32_t count_ = 0;
};

// `records` (without table extras) encoded by RawShard, as format `version`.
RawShard RawOf(const std::vector<ShardRecord>& records, int version) {
  RawShard raw(version);
  for (const ShardRecord& r : records) {
    std::vector<std::string> payloads = {RawShard::Floats(r.values)};
    for (const auto& slot : r.slots) payloads.push_back(RawShard::Floats(slot));
    if (r.spec.routing() == proto::HASH) payloads.push_back(RawShard::Ids(r.hash_ids));
    raw.AddRecord(r.spec, r.version, r.rows, payloads);
  }
  return raw;
}

TEST_F(CheckpointFormatTest, ReadShard_FileBuiltFromTheDocumentedLayout_IsWhatTheWriterWrites) {
  const std::vector<ShardRecord> records = SampleRecords();
  const std::string path = Path("shard-0-of-1.pst");
  ASSERT_TRUE(WriteShardFile(path, records, nullptr).ok());
  EXPECT_EQ(ReadBytes(path), RawOf(records, /*version=*/2).Bytes());
}

TEST_F(CheckpointFormatTest, ReadShard_VersionOneFile_ReadsWithoutTableExtras) {
  const std::vector<ShardRecord> records = SampleRecords();
  const std::string path = Path("shard-0-of-1.pst");
  WriteBytes(path, RawOf(records, /*version=*/1).Bytes());
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameRecords(*got, records);
}

TEST_F(CheckpointFormatTest, ReadShard_SizeNotMatchingSpec_IsDataLossNamingTheVariable) {
  const std::string path = Path("shard-0-of-1.pst");
  const proto::VariableSpec dense = DenseSpec("dense", {2, 3});
  auto hash_spec = [](const std::string& name, std::vector<int64_t> shape) {
    proto::VariableSpec spec = DenseSpec(name, std::move(shape));
    spec.set_routing(proto::HASH);
    return spec;
  };
  const proto::VariableSpec hash = hash_spec("emb", {0, 2});
  struct Case {
    std::string what;
    proto::VariableSpec spec;
    int64_t rows;
    std::vector<std::string> payloads;
  };
  const std::vector<Case> cases = {
      {"values one float short", dense, 2, {RawShard::Floats(Ramp(5, 0))}},
      {"slot one float long",
       dense,
       2,
       {RawShard::Floats(Ramp(6, 0)), RawShard::Floats(Ramp(7, 0))}},
      {"rows not the shape's", dense, 1, {RawShard::Floats(Ramp(3, 0))}},
      {"no tensor", dense, 2, {}},
      {"negative rows", dense, -2, {RawShard::Floats(Ramp(6, 0))}},
      {"hash without ids", hash, 1, {RawShard::Floats(Ramp(2, 0))}},
      {"hash ids short", hash, 2, {RawShard::Floats(Ramp(4, 0)), RawShard::Ids({7})}},
      {"hash ids not whole", hash, 1, {RawShard::Floats(Ramp(2, 0)), std::string(9, 'x')}},
      // rows * 8 wraps to 0 and dim 0 makes the values empty: must not
      // allocate 2^61 ids.
      {"hash rows wrapping", hash_spec("emb0", {0, 0}), int64_t{1} << 61, {"", ""}},
  };
  for (const Case& c : cases) {
    RawShard raw;
    raw.AddRecord(c.spec, 1, c.rows, c.payloads);
    WriteBytes(path, raw.Bytes());
    ExpectDataLoss(path, c.what);
    EXPECT_TRUE(Contains(std::string(ReadShardFile(path).status().message()),
                         absl::StrCat("'", c.spec.name(), "'")))
        << c.what;
  }
}

TEST_F(CheckpointFormatTest, ReadShard_NotAFile_IsDataLoss) {
  const std::string path = Path("a_directory.pst");
  fs::create_directory(path);
  ExpectDataLoss(path, "directory");
}

TEST_F(CheckpointFormatTest, Manifest_RoundTrips) {
  proto::CheckpointManifest m;
  m.set_format_version(1);
  m.set_global_step(1200);
  m.set_created_unix_ms(1700000000123);
  m.mutable_plan()->set_num_ps(2);
  m.mutable_plan()->set_policy("round_robin");
  proto::PlacementPlan::Entry* e = m.mutable_plan()->add_variables();
  *e->mutable_spec() = DenseSpec("dense_0/kernel", {3, 4});
  e->set_ps_index(1);
  proto::CheckpointShard* s = m.add_shards();
  s->set_file("shard-0-of-2.pst");
  s->set_ps_index(0);
  s->set_bytes(1234);
  s->set_crc32(0xdeadbeefu);
  ASSERT_TRUE(WriteManifest(dir_, m).ok());
  EXPECT_FALSE(fs::exists(Path(std::string(kManifestFile) + ".tmp")));
  EXPECT_TRUE(Contains(ReadBytes(Path(kManifestFile)), "global_step"));

  absl::StatusOr<proto::CheckpointManifest> got = ReadManifest(dir_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), m.SerializeAsString());
}

// A disk that fills as the chief writes a manifest: RESOURCE_EXHAUSTED
// naming the file, no temp file left, and the manifest already there (a
// checkpoint saved again at the same step) unchanged. Needs root (a small
// tmpfs).
TEST_F(CheckpointFormatTest, WriteManifest_OnAFullDisk_IsResourceExhausted_AndKeepsTheOldOne) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir_};
  proto::CheckpointManifest m;
  m.set_format_version(1);
  m.set_global_step(100);
  ASSERT_TRUE(WriteManifest(dir_, m).ok());
  const std::string old = ReadBytes(Path(kManifestFile));
  // Fill the disk; then a manifest with a plan too large for what is left.
  {
    std::ofstream filler(Path("filler"), std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), block.size())) {
    }
  }
  for (int i = 0; i < 200; ++i) {
    *m.mutable_plan()->add_variables()->mutable_spec() =
        DenseSpec(absl::StrCat("layer_", i, "/kernel"), {64, 64});
  }
  const absl::Status status = WriteManifest(dir_, m);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(Contains(std::string(status.message()), kManifestFile)) << status;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{kManifestFile, "filler"}));
  EXPECT_EQ(ReadBytes(Path(kManifestFile)), old);
}

TEST_F(CheckpointFormatTest, Manifest_Garbage_IsDataLoss) {
  WriteBytes(Path(kManifestFile), "{\"global_step\": [oops");
  absl::StatusOr<proto::CheckpointManifest> got = ReadManifest(dir_);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(Contains(std::string(got.status().message()), kManifestFile));
}

TEST_F(CheckpointFormatTest, Manifest_Missing_IsNotFound) {
  absl::StatusOr<proto::CheckpointManifest> got = ReadManifest(dir_);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
}

TEST_F(CheckpointFormatTest, ReadManifest_UnknownFieldIsIgnored_OtherFormatVersionIsDataLoss) {
  fs::create_directories(Path("ckpt-000000000100"));
  WriteBytes(Path("ckpt-000000000100/MANIFEST.json"),
             R"({"format_version": 1, "global_step": "100", "added_later": {"x": 1}})");
  absl::StatusOr<proto::CheckpointManifest> read = ReadManifest(Path("ckpt-000000000100"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->global_step(), 100);
  WriteBytes(Path("ckpt-000000000100/MANIFEST.json"), R"({"format_version": 2})");
  read = ReadManifest(Path("ckpt-000000000100"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(std::string(read.status().message()), "format version 2"));
}

TEST_F(CheckpointFormatTest, CheckCheckpointName_AcceptsOnlyCkptDigits) {
  EXPECT_TRUE(CheckCheckpointName("ckpt-000000001200").ok());
  EXPECT_TRUE(CheckCheckpointName("ckpt-7").ok());
  for (const char* bad : {"", "ckpt-", "..", "/etc", "ckpt-1/..", "../ckpt-1", "ckpt-1 ",
                          "ckpt--1", "ckpt-1a", "/tmp/ckpt-1", "ckpt-99999999999999999999"}) {
    absl::Status status = CheckCheckpointName(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
}

TEST_F(CheckpointFormatTest, CheckManifestShards_RefusesPathsRepeatsAndGaps) {
  auto manifest = [](std::vector<std::pair<std::string, int>> shards) {
    proto::CheckpointManifest m;
    for (const auto& [file, index] : shards) {
      proto::CheckpointShard* s = m.add_shards();
      s->set_file(file);
      s->set_ps_index(index);
    }
    return m;
  };
  EXPECT_TRUE(
      CheckManifestShards(manifest({{"shard-0-of-2.pst", 0}, {"shard-1-of-2.pst", 1}})).ok());
  const std::vector<std::vector<std::pair<std::string, int>>> bad = {
      {},
      {{"/etc/passwd", 0}},
      {{"../shard-0-of-1.pst", 0}},
      {{"shard-0-of-1.pst/..", 0}},
      {{"shard-0-of-2.pst", 0}, {"shard-0-of-2.pst", 0}},  // a repeat
      {{"shard-0-of-3.pst", 0}, {"shard-1-of-3.pst", 1}},  // a gap
      {{"shard-1-of-1.pst", 1}},
      {{"shard-00-of-1.pst", 0}},
      {{"shard-0-of-1.pst", 3}},  // ps_index differs
  };
  for (const auto& shards : bad) {
    absl::Status status = CheckManifestShards(manifest(shards));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << (shards.empty() ? std::string("(none)") : shards[0].first);
  }
  std::vector<std::pair<std::string, int>> thousand(1000, {"shard-0-of-1.pst", 0});
  EXPECT_EQ(CheckManifestShards(manifest(thousand)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointFormatTest, ReadShardFile_ThroughASymlink_IsRefused) {
  const std::string target = Path("real.pst");
  proto::CheckpointShard shard;
  ASSERT_TRUE(WriteShardFile(target, {}, &shard).ok());
  fs::create_symlink(target, Path("link.pst"));
  absl::StatusOr<std::vector<ShardRecord>> got = ReadShardFile(Path("link.pst"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_TRUE(ReadShardFile(target).ok());
}

TEST_F(CheckpointFormatTest, WriteShardFile_IntoALinkedDirectory_IsRefused) {
  fs::create_directories(Path("elsewhere"));
  fs::create_directory_symlink(Path("elsewhere"), Path("ckpt-000000000001"));
  proto::CheckpointShard shard;
  absl::Status status = WriteShardFile(Path("ckpt-000000000001/shard-0-of-1.pst"), {}, &shard);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(fs::is_empty(Path("elsewhere")));
}

// A link planted where the shard goes is replaced, never written through.
TEST_F(CheckpointFormatTest, WriteShardFile_OverAPlantedLink_ReplacesTheLinkOnly) {
  WriteBytes(Path("victim"), "precious");
  fs::create_symlink(Path("victim"), Path("shard-0-of-1.pst"));
  proto::CheckpointShard shard;
  ASSERT_TRUE(WriteShardFile(Path("shard-0-of-1.pst"), {}, &shard).ok());
  EXPECT_EQ(ReadBytes(Path("victim")), "precious");
  EXPECT_FALSE(fs::is_symlink(Path("shard-0-of-1.pst")));
  EXPECT_TRUE(ReadShardFile(Path("shard-0-of-1.pst")).ok());
}

}  // namespace
}  // namespace pst::common
