#include "common/checkpoint_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "google/protobuf/util/json_util.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "PSTSHRD1";
constexpr char kTrailer[] = "PSTEND01";
constexpr size_t kTagBytes = 8;
// The smallest record: header_bytes, version, rows, tensor_count, crc.
constexpr size_t kMinRecordBytes = 4 + 8 + 8 + 4 + 4;
// The smallest tensor: payload_bytes and crc.
constexpr size_t kMinTensorBytes = 8 + 4;
constexpr char kCheckpointPrefix[] = "ckpt-";

uint32_t Crc32(const char* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large buffers in chunks.
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    const size_t n = std::min(size, kChunk);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n));
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t Crc32(absl::string_view s) { return Crc32(s.data(), s.size()); }

std::string ErrnoString(int err) { return std::strerror(err); }

// ---------------------------------------------------------------------------
// Files.

// Reads the whole of `path`. NotFound when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", ErrnoString(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", ErrnoString(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
  }
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (true) {
    if (done == data.size()) {
      // The file may have grown since fstat: read on until end of file.
      char extra[4096];
      const ssize_t n = ::read(fd, extra, sizeof(extra));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot read ", path, ": ", ErrnoString(err)));
      }
      if (n == 0) break;
      data.append(extra, static_cast<size_t>(n));
      done = data.size();
      continue;
    }
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot read ", path, ": ", ErrnoString(err)));
    }
    if (n == 0) {  // The file shrank since fstat.
      data.resize(done);
      break;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return data;
}

std::string DirectoryOf(const std::string& path) {
  std::string dir = fs::path(path).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

// Writes `contents` to "<path>.tmp", fsyncs it, renames it to `path` and
// fsyncs the directory. Errors: Internal naming the path and the OS error.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", ErrnoString(errno)));
  }
  auto fail = [&](const char* what, int err) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot ", what, " ", tmp, ": ", ErrnoString(err)));
  };
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return fail("write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return fail("fsync", err);
  }
  if (::close(fd) != 0) return fail("close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ErrnoString(err)));
  }
  const std::string dir = DirectoryOf(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open directory ", dir, " of ", path, ": ", ErrnoString(errno)));
  }
  if (::fsync(dfd) != 0) {
    const int err = errno;
    ::close(dfd);
    return absl::InternalError(
        absl::StrCat("cannot fsync directory ", dir, " of ", path, ": ", ErrnoString(err)));
  }
  ::close(dfd);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Encoding.

void AppendU32(uint32_t v, std::string* out) {
  char b[4];
  std::memcpy(b, &v, sizeof(b));  // Little-endian host (see tensor_util.h).
  out->append(b, sizeof(b));
}
void AppendU64(uint64_t v, std::string* out) {
  char b[8];
  std::memcpy(b, &v, sizeof(b));
  out->append(b, sizeof(b));
}
void AppendI64(int64_t v, std::string* out) { AppendU64(static_cast<uint64_t>(v), out); }

void AppendTensor(const void* data, size_t bytes, std::string* out) {
  AppendU64(bytes, out);
  const size_t start = out->size();
  out->append(static_cast<const char*>(data), bytes);
  AppendU32(Crc32(out->data() + start, bytes), out);
}

// Elements in one row: the product of shape[1:] (1 for rank 1).
absl::StatusOr<int64_t> RowElements(const proto::VariableSpec& spec) {
  Shape rest;
  for (int i = 1; i < spec.shape_size(); ++i) rest.Add(spec.shape(i));
  return NumElements(rest);
}

bool IsHash(const proto::VariableSpec& spec) { return spec.routing() == proto::HASH; }

// Bytes of values (and of each slot) for `rows` rows of `spec`; an error
// (the caller picks its code) for a bad shape or an overflow.
absl::StatusOr<uint64_t> FloatPayloadBytes(const proto::VariableSpec& spec, int64_t rows) {
  absl::StatusOr<int64_t> dim = RowElements(spec);
  if (!dim.ok()) return dim.status();
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("negative row count ", rows));
  constexpr int64_t kMaxBytes = INT64_MAX;
  if (*dim != 0 && rows > kMaxBytes / static_cast<int64_t>(sizeof(float)) / *dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(rows, " rows of ", *dim, " elements overflow a 64-bit size"));
  }
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(*dim) * sizeof(float);
}

absl::Status CheckRecordForWrite(const std::string& path, const ShardRecord& r) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": variable '", r.spec.name(), "': ", why));
  };
  absl::StatusOr<uint64_t> bytes = FloatPayloadBytes(r.spec, r.rows);
  if (!bytes.ok()) return bad(bytes.status().message());
  const uint64_t elements = *bytes / sizeof(float);
  if (!IsHash(r.spec) && r.spec.shape_size() > 0 && r.rows != r.spec.shape(0)) {
    return bad(absl::StrCat(r.rows, " rows, but the shape is ", ShapeString(r.spec.shape())));
  }
  if (r.values.size() != elements) {
    return bad(absl::StrCat(r.values.size(), " values, expected ", elements));
  }
  for (size_t i = 0; i < r.slots.size(); ++i) {
    if (r.slots[i].size() != elements) {
      return bad(
          absl::StrCat("slot ", i, " has ", r.slots[i].size(), " values, expected ", elements));
    }
  }
  const size_t want_ids = IsHash(r.spec) ? static_cast<size_t>(r.rows) : 0;
  if (r.hash_ids.size() != want_ids) {
    return bad(absl::StrCat(r.hash_ids.size(), " hash ids, expected ", want_ids));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Decoding.

// Reads little-endian fields from a buffer, never past its end.
class Cursor {
 public:
  explicit Cursor(absl::string_view data) : data_(data) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

  bool U32(uint32_t* v) { return Raw(v, sizeof(*v)); }
  bool U64(uint64_t* v) { return Raw(v, sizeof(*v)); }
  bool I64(int64_t* v) { return Raw(v, sizeof(*v)); }
  // A view of the next `n` bytes; false when fewer remain.
  bool Bytes(uint64_t n, absl::string_view* out) {
    if (n > remaining()) return false;
    *out = data_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }

 private:
  bool Raw(void* v, size_t n) {
    if (n > remaining()) return false;
    std::memcpy(v, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }

  absl::string_view data_;
  size_t pos_ = 0;
};

// Parses the bytes of the shard file `path`.
absl::StatusOr<std::vector<ShardRecord>> ParseShard(const std::string& path,
                                                    absl::string_view data) {
  auto loss = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("checkpoint shard ", path, ": ", why));
  };
  Cursor in(data);
  absl::string_view magic;
  if (!in.Bytes(kTagBytes, &magic)) {
    return loss(absl::StrCat("truncated: ", data.size(), " bytes, too short for the magic"));
  }
  if (magic != absl::string_view(kMagic, kTagBytes)) return loss("bad magic (not a shard file)");
  uint32_t record_count = 0;
  if (!in.U32(&record_count)) return loss("truncated in the record count");

  std::vector<ShardRecord> records;
  records.reserve(std::min<size_t>(record_count, in.remaining() / kMinRecordBytes));
  for (uint32_t i = 0; i < record_count; ++i) {
    // Until the spec is parsed, the record is known by its index only.
    std::string where = absl::StrCat("record ", i, " of ", record_count);
    auto rec_loss = [&](absl::string_view why) { return loss(absl::StrCat(where, ": ", why)); };
    const size_t start = in.pos();
    uint32_t header_bytes = 0;
    absl::string_view header;
    if (!in.U32(&header_bytes)) return rec_loss("truncated in the header length");
    if (!in.Bytes(header_bytes, &header)) {
      return rec_loss(absl::StrCat("header of ", header_bytes, " bytes runs past the end (",
                                   in.remaining(), " bytes left)"));
    }
    ShardRecord r;
    if (!r.spec.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
      return rec_loss("header is not a valid VariableSpec");
    }
    where = absl::StrCat(where, " (variable '", r.spec.name(), "')");
    uint32_t tensor_count = 0;
    if (!in.I64(&r.version) || !in.I64(&r.rows) || !in.U32(&tensor_count)) {
      return rec_loss("truncated in the record header");
    }
    if (tensor_count > in.remaining() / kMinTensorBytes) {
      return rec_loss(
          absl::StrCat(tensor_count, " tensors cannot fit in the ", in.remaining(), " bytes left"));
    }
    std::vector<absl::string_view> payloads;
    payloads.reserve(tensor_count);
    for (uint32_t t = 0; t < tensor_count; ++t) {
      uint64_t payload_bytes = 0;
      absl::string_view payload;
      uint32_t crc = 0;
      if (!in.U64(&payload_bytes)) return rec_loss(absl::StrCat("truncated in tensor ", t));
      if (!in.Bytes(payload_bytes, &payload)) {
        return rec_loss(absl::StrCat("tensor ", t, " of ", payload_bytes,
                                     " bytes runs past the end (", in.remaining(), " bytes left)"));
      }
      if (!in.U32(&crc)) return rec_loss(absl::StrCat("truncated in the crc32 of tensor ", t));
      const uint32_t actual = Crc32(payload);
      if (crc != actual) {
        return rec_loss(absl::StrCat("tensor ", t, " checksum mismatch: stored crc32 ", crc,
                                     ", computed ", actual));
      }
      payloads.push_back(payload);
    }
    const uint32_t actual_crc = Crc32(data.substr(start, in.pos() - start));
    uint32_t record_crc = 0;
    if (!in.U32(&record_crc)) return rec_loss("truncated in the record crc32");
    if (record_crc != actual_crc) {
      return rec_loss(absl::StrCat("record checksum mismatch: stored crc32 ", record_crc,
                                   ", computed ", actual_crc));
    }

    // The bytes are as written; now check they agree with the spec.
    const bool hash = IsHash(r.spec);
    absl::StatusOr<uint64_t> float_bytes = FloatPayloadBytes(r.spec, r.rows);
    if (!float_bytes.ok()) {
      return rec_loss(absl::StrCat("shape ", ShapeString(r.spec.shape()), " with ", r.rows,
                                   " rows: ", float_bytes.status().message()));
    }
    if (!hash && r.spec.shape_size() > 0 && r.rows != r.spec.shape(0)) {
      return rec_loss(
          absl::StrCat(r.rows, " rows stored, but the shape is ", ShapeString(r.spec.shape())));
    }
    const uint32_t fixed = hash ? 2 : 1;  // values (and hash ids)
    if (tensor_count < fixed) {
      return rec_loss(absl::StrCat(tensor_count, " tensors, expected at least ", fixed));
    }
    const uint32_t num_slots = tensor_count - fixed;
    for (uint32_t t = 0; t < 1 + num_slots; ++t) {
      if (payloads[t].size() != *float_bytes) {
        return rec_loss(absl::StrCat("tensor ", t, " is ", payloads[t].size(), " bytes, expected ",
                                     *float_bytes, " for ", r.rows, " rows of shape ",
                                     ShapeString(r.spec.shape())));
      }
    }
    if (hash && (payloads.back().size() % sizeof(int64_t) != 0 ||
                 payloads.back().size() / sizeof(int64_t) != static_cast<uint64_t>(r.rows))) {
      return rec_loss(absl::StrCat("hash ids are ", payloads.back().size(), " bytes, expected ",
                                   r.rows, " ids of 8 bytes"));
    }

    const size_t elements = static_cast<size_t>(*float_bytes / sizeof(float));
    auto copy_floats = [elements](absl::string_view p, std::vector<float>* out) {
      out->resize(elements);
      if (elements > 0) std::memcpy(out->data(), p.data(), p.size());
    };
    copy_floats(payloads[0], &r.values);
    r.slots.resize(num_slots);
    for (uint32_t s = 0; s < num_slots; ++s) copy_floats(payloads[1 + s], &r.slots[s]);
    if (hash) {
      r.hash_ids.resize(static_cast<size_t>(r.rows));
      if (r.rows > 0) {
        std::memcpy(r.hash_ids.data(), payloads.back().data(), payloads.back().size());
      }
    }
    records.push_back(std::move(r));
  }
  absl::string_view trailer;
  if (!in.Bytes(kTagBytes, &trailer)) return loss("truncated before the trailer");
  if (trailer != absl::string_view(kTrailer, kTagBytes)) return loss("bad trailer");
  if (in.remaining() != 0) {
    return loss(absl::StrCat(in.remaining(), " unexpected bytes after the trailer"));
  }
  return records;
}

// "ckpt-<digits>": the step, or -1 for any other name.
int64_t CheckpointStep(const std::string& name) {
  const absl::string_view prefix(kCheckpointPrefix);
  if (name.size() <= prefix.size() || absl::string_view(name).substr(0, prefix.size()) != prefix) {
    return -1;
  }
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return -1;
  int64_t step = 0;
  const auto [ptr, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || ptr != last) return -1;
  return step;
}

struct CheckpointDir {
  int64_t step = 0;
  std::string path;
  bool committed = false;  // has a readable manifest
};

// Every "ckpt-<digits>" directory under `root`.
std::vector<CheckpointDir> ScanCheckpointDirs(const std::string& root) {
  std::vector<CheckpointDir> dirs;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) return dirs;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const int64_t step = CheckpointStep(it->path().filename().string());
    if (step < 0) continue;
    std::error_code dir_ec;
    if (!it->is_directory(dir_ec) || dir_ec) continue;
    CheckpointDir d;
    d.step = step;
    d.path = it->path().string();
    d.committed = ReadManifest(d.path).ok();
    dirs.push_back(std::move(d));
  }
  if (ec) dirs.clear();
  std::sort(dirs.begin(), dirs.end(), [](const CheckpointDir& a, const CheckpointDir& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return dirs;
}

}  // namespace

std::string CheckpointDirName(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld", static_cast<long long>(step));
  return buf;
}

std::string ShardFileName(int ps_index, int num_ps) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "shard-%d-of-%d.pst", ps_index, num_ps);
  return buf;
}

absl::Status WriteShardFile(const std::string& path, const std::vector<ShardRecord>& records,
                            proto::CheckpointShard* shard) {
  if (records.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", records.size(), " records is too many"));
  }
  for (const ShardRecord& r : records) PST_RETURN_IF_ERROR(CheckRecordForWrite(path, r));

  // The file is built in memory, once: reserve it all, so no append copies
  // what is there already.
  size_t estimate = 64;
  for (const ShardRecord& r : records) {
    estimate += 128 + r.spec.ByteSizeLong() + r.values.size() * sizeof(float) +
                r.hash_ids.size() * sizeof(int64_t);
    for (const std::vector<float>& slot : r.slots) estimate += 16 + slot.size() * sizeof(float);
  }
  std::string out;
  out.reserve(estimate);
  out.append(kMagic, kTagBytes);
  AppendU32(static_cast<uint32_t>(records.size()), &out);
  for (const ShardRecord& r : records) {
    const size_t start = out.size();
    const std::string header = r.spec.SerializeAsString();
    AppendU32(static_cast<uint32_t>(header.size()), &out);
    out.append(header);
    AppendI64(r.version, &out);
    AppendI64(r.rows, &out);
    const bool hash = IsHash(r.spec);
    AppendU32(static_cast<uint32_t>(1 + r.slots.size() + (hash ? 1 : 0)), &out);
    AppendTensor(r.values.data(), r.values.size() * sizeof(float), &out);
    for (const std::vector<float>& slot : r.slots) {
      AppendTensor(slot.data(), slot.size() * sizeof(float), &out);
    }
    if (hash) AppendTensor(r.hash_ids.data(), r.hash_ids.size() * sizeof(int64_t), &out);
    AppendU32(Crc32(out.data() + start, out.size() - start), &out);
  }
  out.append(kTrailer, kTagBytes);

  PST_RETURN_IF_ERROR(WriteFileAtomically(path, out));
  if (shard != nullptr) {
    shard->set_file(fs::path(path).filename().string());
    shard->set_bytes(static_cast<int64_t>(out.size()));
    shard->set_crc32(Crc32(out));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ShardRecord>> ReadShardFile(const std::string& path) {
  PST_ASSIGN_OR_RETURN(const std::string data, ReadWholeFile(path));
  return ParseShard(path, data);
}

absl::Status WriteManifest(const std::string& dir, const proto::CheckpointManifest& manifest) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(manifest, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode the manifest for ", path, ": ", status.ToString()));
  }
  return WriteFileAtomically(path, json);
}

absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  PST_ASSIGN_OR_RETURN(const std::string json, ReadWholeFile(path));
  proto::CheckpointManifest manifest;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &manifest);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest ", path, " does not parse: ", status.ToString()));
  }
  return manifest;
}

std::vector<std::string> ListCheckpoints(const std::string& root) {
  std::vector<std::string> out;
  for (CheckpointDir& d : ScanCheckpointDirs(root)) {
    if (d.committed) out.push_back(std::move(d.path));
  }
  return out;
}

absl::Status PruneCheckpoints(const std::string& root, int keep) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints to keep must be at least 1, got ", keep));
  }
  const std::vector<CheckpointDir> dirs = ScanCheckpointDirs(root);
  int64_t newest = -1;
  for (const CheckpointDir& d : dirs) {
    if (d.committed) {
      newest = d.step;
      break;
    }
  }
  if (newest < 0) return absl::OkStatus();  // Nothing committed: touch nothing.

  std::vector<std::string> errors;
  int kept = 0;
  for (const CheckpointDir& d : dirs) {
    bool remove = false;
    if (d.committed) {
      remove = kept >= keep;
      if (!remove) ++kept;
    } else {
      remove = d.step < newest;  // Newer debris may be a save in progress.
    }
    if (!remove) continue;
    std::error_code ec;
    fs::remove_all(d.path, ec);
    if (ec) errors.push_back(absl::StrCat(d.path, ": ", ec.message()));
  }
  if (!errors.empty()) {
    return absl::InternalError(
        absl::StrCat("cannot remove old checkpoints: ", absl::StrJoin(errors, "; ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointReport> InspectCheckpoint(const std::string& dir) {
  PST_ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest, ReadManifest(dir));
  CheckpointReport report;
  report.global_step = manifest.global_step();
  report.num_ps = manifest.shards_size();
  for (const proto::CheckpointShard& shard : manifest.shards()) {
    const std::string& name = shard.file();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return absl::DataLossError(absl::StrCat("checkpoint manifest in ", dir,
                                              " names an invalid shard file '", name, "'"));
    }
    const std::string path = (fs::path(dir) / name).string();
    PST_ASSIGN_OR_RETURN(const std::string data, ReadWholeFile(path));
    if (static_cast<int64_t>(data.size()) != shard.bytes()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is ", data.size(),
                                              " bytes, the manifest says ", shard.bytes()));
    }
    const uint32_t crc = Crc32(data);
    if (crc != shard.crc32()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " has crc32 ", crc,
                                              ", the manifest says ", shard.crc32()));
    }
    PST_ASSIGN_OR_RETURN(const std::vector<ShardRecord> records, ParseShard(path, data));
    report.total_bytes += static_cast<int64_t>(data.size());
    for (const ShardRecord& r : records) {
      CheckpointReport::Variable v;
      v.name = r.spec.name();
      if (IsHash(r.spec)) {
        std::vector<int64_t> rest(r.spec.shape().begin(), r.spec.shape().end());
        if (!rest.empty()) rest.erase(rest.begin());
        v.shape = absl::StrCat("[", r.rows, " ids", rest.empty() ? "" : ", ",
                               absl::StrJoin(rest, ", "), "]");
      } else {
        v.shape = ShapeString(r.spec.shape());
      }
      v.rows = r.rows;
      v.version = r.version;
      v.slots = static_cast<int>(r.slots.size());
      v.ps_index = shard.ps_index();
      report.variables.push_back(std::move(v));
    }
  }
  // Every variable (or partition) the plan placed was written by some ps. A
  // ps that restarted just before a save would write an empty shard whose
  // checksums are all good.
  absl::flat_hash_set<std::string> saved;
  for (const CheckpointReport::Variable& v : report.variables) saved.insert(v.name);
  for (const proto::PlacementPlan::Entry& entry : manifest.plan().variables()) {
    if (!saved.contains(entry.spec().name())) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", dir, " is incomplete: its plan places '", entry.spec().name(),
                       "' on ps ", entry.ps_index(), ", but no shard holds it"));
    }
  }
  return report;
}

}  // namespace pst::common
