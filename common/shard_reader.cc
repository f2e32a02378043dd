#include "common/shard_reader.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/safe_file.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"

namespace pst::common {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(const std::string& path) {
  absl::StatusOr<int> fd = OpenRegularFileForRead(path);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    const int err = errno;
    ::close(*fd);
    return OsError("stat", path, err);
  }
  std::unique_ptr<ShardReader> reader(new ShardReader(*fd, path, st.st_size));
  char magic[kShardTagBytes];
  if (reader->remaining() < kShardTagBytes) {
    return reader->Loss(
        absl::StrCat("truncated: ", reader->file_bytes_, " bytes, too short for the magic"));
  }
  PST_RETURN_IF_ERROR(reader->Read(magic, kShardTagBytes, "the magic"));
  if (std::memcmp(magic, kShardMagicV1, kShardTagBytes) == 0) {
    reader->format_ = 1;
  } else if (std::memcmp(magic, kShardMagic, kShardTagBytes) != 0) {
    return reader->Loss("bad magic (not a shard file)");
  }
  PST_RETURN_IF_ERROR(
      reader->Read(&reader->record_count_, sizeof(reader->record_count_), "the record count"));
  return reader;
}

ShardReader::ShardReader(int fd, std::string path, int64_t file_bytes)
    : fd_(fd), path_(std::move(path)), file_bytes_(file_bytes), buffer_(kBufferBytes) {
  file_crc_ = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
}

ShardReader::~ShardReader() { ::close(fd_); }

absl::Status ShardReader::Loss(const std::string& why) const {
  return absl::DataLossError(absl::StrCat("checkpoint shard ", path_, ": ", why));
}

absl::Status ShardReader::Read(void* out, uint64_t n, const std::string& what) {
  if (n > remaining()) {
    return Loss(absl::StrCat("truncated in ", what, " (", n, " bytes needed, ", remaining(),
                             " left)"));
  }
  char* dst = static_cast<char*>(out);
  while (n > 0) {
    if (buffer_pos_ == buffer_len_) {
      ssize_t got;
      do {
        got = ::read(fd_, buffer_.data(), buffer_.size());
      } while (got < 0 && errno == EINTR);
      if (got < 0) return OsError("read", path_, errno);
      if (got == 0) return Loss(absl::StrCat("truncated in ", what, " (the file shrank)"));
      buffer_pos_ = 0;
      buffer_len_ = static_cast<size_t>(got);
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, buffer_len_ - buffer_pos_));
    const Bytef* bytes = reinterpret_cast<const Bytef*>(buffer_.data() + buffer_pos_);
    file_crc_ = static_cast<uint32_t>(crc32(file_crc_, bytes, static_cast<uInt>(take)));
    if (in_record_) {
      record_crc_ = static_cast<uint32_t>(crc32(record_crc_, bytes, static_cast<uInt>(take)));
    }
    std::memcpy(dst, buffer_.data() + buffer_pos_, take);
    buffer_pos_ += take;
    offset_ += take;
    dst += take;
    n -= take;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ShardReader::Skip(uint64_t n, const std::string& what) {
  if (n > remaining()) {
    return Loss(absl::StrCat("truncated in ", what, " (", n, " bytes needed, ", remaining(),
                             " left)"));
  }
  scratch_.resize(buffer_.size());
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, scratch_.size()));
    PST_RETURN_IF_ERROR(Read(scratch_.data(), take, what));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(scratch_.data()), static_cast<uInt>(take));
    n -= take;
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
absl::Status ShardReader::ReadTensor(std::vector<T>* out, uint64_t bytes, bool keeping,
                                     const std::string& what, ShardRowsLayout* layout) {
  // `bytes` 0: any size the file gives (and has).
  uint64_t payload_bytes = 0;
  PST_RETURN_IF_ERROR(Read(&payload_bytes, sizeof(payload_bytes), what));
  if (payload_bytes > remaining() || (bytes != 0 && payload_bytes != bytes) ||
      payload_bytes % sizeof(T) != 0) {
    return Loss(absl::StrCat(what, " of ", payload_bytes, " bytes, expected ",
                             bytes != 0 ? absl::StrCat(bytes) : "what is left", " (",
                             remaining(), " bytes left)"));
  }
  if (layout != nullptr) layout->offsets.push_back(offset_);
  uint32_t actual = 0;
  if (keeping) {
    out->resize(static_cast<size_t>(payload_bytes / sizeof(T)));
    PST_RETURN_IF_ERROR(Read(out->data(), payload_bytes, what));
    actual = ShardCrc32(reinterpret_cast<const char*>(out->data()), payload_bytes);
  } else {
    PST_ASSIGN_OR_RETURN(actual, Skip(payload_bytes, what));
  }
  uint32_t stored = 0;
  PST_RETURN_IF_ERROR(Read(&stored, sizeof(stored), absl::StrCat("the crc32 of ", what)));
  if (stored != actual) {
    return Loss(absl::StrCat(what, " checksum mismatch: stored crc32 ", stored, ", computed ",
                             actual));
  }
  if (layout != nullptr) layout->crcs.push_back(stored);
  return absl::OkStatus();
}

absl::StatusOr<bool> ShardReader::Next(ShardRecord* record, const KeepTensors& keep,
                                       ShardRowsLayout* layout) {
  if (layout != nullptr) *layout = ShardRowsLayout();
  if (finished_) return false;
  if (records_read_ == record_count_) {
    char trailer[kShardTagBytes];
    if (remaining() < kShardTagBytes) return Loss("truncated before the trailer");
    PST_RETURN_IF_ERROR(Read(trailer, kShardTagBytes, "the trailer"));
    if (std::memcmp(trailer, kShardTrailer, kShardTagBytes) != 0) return Loss("bad trailer");
    if (remaining() != 0) {
      return Loss(absl::StrCat(remaining(), " unexpected bytes after the trailer"));
    }
    finished_ = true;
    return false;
  }
  const uint32_t index = records_read_++;
  // Until the spec is parsed, the record is known by its index only.
  std::string where = absl::StrCat("record ", index, " of ", record_count_);
  auto loss = [&](const std::string& why) { return Loss(absl::StrCat(where, ": ", why)); };
  auto read = [&](void* out, uint64_t n, const std::string& what) -> absl::Status {
    if (n > remaining()) {
      return loss(absl::StrCat(what, " of ", n, " bytes runs past the end (", remaining(),
                               " bytes left)"));
    }
    return Read(out, n, what);
  };
  *record = ShardRecord();
  ShardRecord& r = *record;
  record_crc_ = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
  in_record_ = true;

  uint32_t header_bytes = 0;
  PST_RETURN_IF_ERROR(read(&header_bytes, sizeof(header_bytes), "the header length"));
  if (header_bytes > remaining()) {
    return loss(absl::StrCat("header of ", header_bytes, " bytes runs past the end (", remaining(),
                             " bytes left)"));
  }
  std::string header(header_bytes, '\0');
  PST_RETURN_IF_ERROR(read(header.data(), header_bytes, "the header"));
  if (!r.spec.ParseFromString(header)) return loss("header is not a valid VariableSpec");
  where = absl::StrCat(where, " (variable '", r.spec.name(), "')");
  uint32_t tensor_count = 0;
  PST_RETURN_IF_ERROR(read(&r.version, sizeof(r.version), "the record header"));
  PST_RETURN_IF_ERROR(read(&r.rows, sizeof(r.rows), "the record header"));
  PST_RETURN_IF_ERROR(read(&tensor_count, sizeof(tensor_count), "the record header"));
  if (tensor_count > remaining() / kShardMinTensorBytes) {
    return loss(
        absl::StrCat(tensor_count, " tensors cannot fit in the ", remaining(), " bytes left"));
  }
  const bool hash = ShardSpecIsHash(r.spec);
  absl::StatusOr<uint64_t> float_bytes = ShardFloatPayloadBytes(r.spec, r.rows);
  if (!float_bytes.ok()) {
    return loss(absl::StrCat("shape ", ShapeString(r.spec.shape()), " with ", r.rows,
                             " rows: ", float_bytes.status().message()));
  }
  if (!hash && r.spec.shape_size() > 0 && r.rows != r.spec.shape(0)) {
    return loss(
        absl::StrCat(r.rows, " rows stored, but the shape is ", ShapeString(r.spec.shape())));
  }
  const uint32_t fixed = hash ? 2 : 1;  // values (and hash ids)
  if (tensor_count < fixed) {
    return loss(absl::StrCat(tensor_count, " tensors, expected at least ", fixed));
  }
  const uint32_t num_slots = tensor_count - fixed;
  r.slots.resize(num_slots);
  const bool keeping = keep == nullptr || keep(r.spec);
  // Laid out for ReadRows: a hash record not kept.
  ShardRowsLayout* rows_layout = hash && !keeping ? layout : nullptr;
  if (rows_layout != nullptr) {
    rows_layout->rows = r.rows;
    rows_layout->slots = static_cast<int>(num_slots);
    rows_layout->dim = r.rows > 0 ? static_cast<int64_t>(*float_bytes / sizeof(float)) / r.rows : 0;
  }
  for (uint32_t t = 0; t < tensor_count; ++t) {
    uint64_t payload_bytes = 0;
    PST_RETURN_IF_ERROR(read(&payload_bytes, sizeof(payload_bytes), absl::StrCat("tensor ", t)));
    const bool ids = hash && t == tensor_count - 1;
    if (ids && static_cast<uint64_t>(r.rows) > remaining() / sizeof(int64_t)) {
      return loss(absl::StrCat(r.rows, " hash ids cannot fit in the ", remaining(),
                               " bytes left"));
    }
    const uint64_t expected = ids ? static_cast<uint64_t>(r.rows) * sizeof(int64_t) : *float_bytes;
    if (payload_bytes > remaining()) {
      return loss(absl::StrCat("tensor ", t, " of ", payload_bytes, " bytes runs past the end (",
                               remaining(), " bytes left)"));
    }
    if (payload_bytes != expected) {
      if (ids) {
        return loss(absl::StrCat("hash ids are ", payload_bytes, " bytes, expected ", r.rows,
                                 " ids of 8 bytes"));
      }
      return loss(absl::StrCat("tensor ", t, " is ", payload_bytes, " bytes, expected ", expected,
                               " for ", r.rows, " rows of shape ", ShapeString(r.spec.shape())));
    }
    uint32_t actual = 0;
    if (keeping) {
      void* data;
      if (ids) {
        r.hash_ids.resize(static_cast<size_t>(r.rows));
        data = r.hash_ids.data();
      } else {
        std::vector<float>& floats = t == 0 ? r.values : r.slots[t - 1];
        floats.resize(static_cast<size_t>(payload_bytes / sizeof(float)));
        data = floats.data();
      }
      PST_RETURN_IF_ERROR(read(data, payload_bytes, absl::StrCat("tensor ", t)));
      actual = ShardCrc32(static_cast<const char*>(data), payload_bytes);
    } else {
      if (rows_layout != nullptr) rows_layout->offsets.push_back(offset_);
      PST_ASSIGN_OR_RETURN(actual, Skip(payload_bytes, absl::StrCat("tensor ", t)));
    }
    uint32_t stored = 0;
    PST_RETURN_IF_ERROR(read(&stored, sizeof(stored), absl::StrCat("the crc32 of tensor ", t)));
    if (stored != actual) {
      return loss(absl::StrCat("tensor ", t, " checksum mismatch: stored crc32 ", stored,
                               ", computed ", actual));
    }
    if (rows_layout != nullptr) rows_layout->crcs.push_back(stored);
  }
  if (format_ >= 2) {
    uint32_t extras = 0;
    PST_RETURN_IF_ERROR(read(&extras, sizeof(extras), "the table extras"));
    if ((extras & ~(kShardRowEntries | kShardAdmission | kShardRemoved)) != 0) {
      return loss(absl::StrCat("unknown table extras ", extras));
    }
    if ((extras & kShardRowEntries) != 0) {
      if (!hash) return loss("row entries for a variable that is not a hash table");
      const uint64_t n = static_cast<uint64_t>(r.rows);
      if (n > remaining() / 16) {
        return loss(absl::StrCat(r.rows, " row entries cannot fit in the ", remaining(),
                                 " bytes left"));
      }
      PST_RETURN_IF_ERROR(
          ReadTensor(&r.row_last, n * sizeof(int64_t), keeping, "row entries", rows_layout));
      PST_RETURN_IF_ERROR(
          ReadTensor(&r.row_count, n * sizeof(double), keeping, "row counts", rows_layout));
      if (rows_layout != nullptr) rows_layout->entries = true;
    }
    if ((extras & kShardAdmission) != 0) {
      std::vector<char> admission;
      // Kept whatever `keep` says: small (a fixed size), and a streamed
      // table's restore needs it.
      PST_RETURN_IF_ERROR(
          ReadTensor(&admission, 0, keeping || rows_layout != nullptr, "the admission counts"));
      r.admission.assign(admission.begin(), admission.end());
    }
    if ((extras & kShardRemoved) != 0) {
      if (!hash) return loss("ids removed from a variable that is not a hash table");
      // Kept whatever `keep` says: a restore of a streamed table removes
      // them too, and a report counts them (8 bytes an id, against a row's
      // values and slots).
      PST_RETURN_IF_ERROR(ReadTensor(&r.removed_ids, 0, /*keeping=*/true, "the removed ids"));
    }
  }
  in_record_ = false;
  const uint32_t actual_crc = record_crc_;
  uint32_t record_crc = 0;
  PST_RETURN_IF_ERROR(read(&record_crc, sizeof(record_crc), "the record crc32"));
  if (record_crc != actual_crc) {
    return loss(absl::StrCat("record checksum mismatch: stored crc32 ", record_crc, ", computed ",
                             actual_crc));
  }
  return true;
}

absl::Status ShardReader::ReadRows(const ShardRowsLayout& layout,
                                   absl::FunctionRef<absl::Status(const ShardRowChunk&)> fn) {
  const size_t floats = static_cast<size_t>(1 + layout.slots);
  const size_t tensors = floats + 1 + (layout.entries ? 2 : 0);
  if (layout.offsets.size() != tensors || layout.crcs.size() != tensors || layout.dim < 0 ||
      layout.rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint shard ", path_, ": a row layout Next did not make"));
  }
  const uint64_t dim = static_cast<uint64_t>(layout.dim);
  // Each tensor's element size, and the rows of a chunk: about 1 MiB of
  // the widest tensor.
  std::vector<uint64_t> element(tensors, sizeof(int64_t));
  for (size_t t = 0; t < floats; ++t) element[t] = dim * sizeof(float);
  const uint64_t widest = std::max<uint64_t>(dim * sizeof(float), sizeof(int64_t));
  const int64_t chunk_rows = static_cast<int64_t>(std::max<uint64_t>(1, kBufferBytes / widest));
  std::vector<std::vector<char>> data(tensors);
  std::vector<uint32_t> crcs(tensors, 0);  // of no bytes
  ShardRowChunk chunk;
  chunk.dim = layout.dim;
  chunk.slots.resize(static_cast<size_t>(layout.slots));
  for (int64_t first = 0; first < layout.rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, layout.rows - first);
    for (size_t t = 0; t < tensors; ++t) {
      const uint64_t bytes = static_cast<uint64_t>(n) * element[t];
      data[t].resize(static_cast<size_t>(bytes));
      uint64_t at = layout.offsets[t] + static_cast<uint64_t>(first) * element[t];
      if (at + bytes > static_cast<uint64_t>(file_bytes_)) {
        return Loss("cut short since it was checked");
      }
      for (uint64_t done = 0; done < bytes;) {
        const ssize_t got = ::pread(fd_, data[t].data() + done, bytes - done,
                                    static_cast<off_t>(at + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return OsError("read", path_, errno);
        if (got == 0) return Loss("cut short since it was checked");
        done += static_cast<uint64_t>(got);
      }
      crcs[t] = ShardCrc32(data[t].data(), bytes, crcs[t]);
    }
    chunk.first = first;
    chunk.n = n;
    chunk.values = reinterpret_cast<const float*>(data[0].data());
    for (int s = 0; s < layout.slots; ++s) {
      chunk.slots[s] = reinterpret_cast<const float*>(data[1 + s].data());
    }
    chunk.ids = reinterpret_cast<const int64_t*>(data[floats].data());
    chunk.last = layout.entries ? reinterpret_cast<const int64_t*>(data[floats + 1].data()) : nullptr;
    chunk.count = layout.entries ? reinterpret_cast<const double*>(data[floats + 2].data()) : nullptr;
    PST_RETURN_IF_ERROR(fn(chunk));
  }
  for (size_t t = 0; t < tensors; ++t) {
    if (crcs[t] != layout.crcs[t]) {
      return Loss(absl::StrCat("a tensor's checksum no longer matches (stored crc32 ",
                               layout.crcs[t], ", computed ", crcs[t],
                               "): the file changed since it was checked"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pst::common
