// WriteShardFile (common/checkpoint_format.h): a shard file streamed to
// disk. Every size in the format is known before a byte is written (a
// stream is counted first), so each tensor has a place in the file from the
// start and is filled there through a buffer of its own: the rows of a
// stream, which give one row of every tensor at a time, are written in one
// pass. The checksums of a record and of the whole file, which run over
// bytes written out of order, are made from each piece's own crc32 with
// zlib's crc32_combine.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_layout.h"
#include "common/safe_file.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

uint32_t Combine(uint32_t first, uint32_t second, uint64_t second_bytes) {
  return static_cast<uint32_t>(
      crc32_combine(first, second, static_cast<z_off_t>(second_bytes)));
}

// The file as a sequence of pieces, each written at its place whenever its
// bytes are ready; its checksums are combined from the pieces' at the end.
class FileBuilder {
  struct Piece {
    uint64_t bytes = 0;
    uint32_t crc = 0;
    bool done = false;
  };

 public:
  // A piece whose bytes come later, through a buffer.
  class Sink {
   public:
    Sink(FileBuilder* file, size_t piece, uint64_t offset, uint64_t bytes)
        : file_(file), piece_(piece), offset_(offset), bytes_(bytes) {}

    absl::Status Append(const void* data, size_t n) {
      if (written_ + buffer_.size() + n > bytes_) return Overflow(n);
      const char* p = static_cast<const char*>(data);
      if (buffer_.size() + n > kBufferBytes) PST_RETURN_IF_ERROR(Flush());
      if (n >= kBufferBytes) return WriteThrough(p, n);
      buffer_.insert(buffer_.end(), p, p + n);
      return absl::OkStatus();
    }
    // Flushes, checks that the payload got every byte, and writes its
    // crc32 after it.
    absl::Status Finish() {
      PST_RETURN_IF_ERROR(Flush());
      if (written_ != bytes_) {
        return absl::InternalError(absl::StrCat("cannot write ", file_->path_, ": a tensor got ",
                                                written_, " of its ", bytes_, " bytes"));
      }
      file_->pieces_[piece_].crc = crc_;
      file_->pieces_[piece_].done = true;
      PST_RETURN_IF_ERROR(file_->file_->WriteAt(offset_ + bytes_, &crc_, sizeof(crc_)));
      file_->pieces_[piece_ + 1] =
          Piece{sizeof(crc_), ShardCrc32(reinterpret_cast<const char*>(&crc_), sizeof(crc_)), true};
      return absl::OkStatus();
    }

   private:
    // Each tensor of a streamed record has one: a save of a table with
    // two slots and entries holds six.
    static constexpr size_t kBufferBytes = size_t{256} << 10;

    absl::Status Flush() {
      if (buffer_.empty()) return absl::OkStatus();
      absl::Status s = WriteThrough(buffer_.data(), buffer_.size());
      buffer_.clear();
      return s;
    }
    absl::Status WriteThrough(const char* p, size_t n) {
      PST_RETURN_IF_ERROR(file_->file_->WriteAt(offset_ + written_, p, n));
      crc_ = ShardCrc32(p, n, crc_);
      written_ += n;
      return absl::OkStatus();
    }
    absl::Status Overflow(size_t n) const {
      return absl::InternalError(absl::StrCat("cannot write ", file_->path_, ": a tensor of ",
                                              bytes_, " bytes was given ",
                                              written_ + buffer_.size() + n));
    }

    FileBuilder* file_;
    size_t piece_;
    uint64_t offset_;
    uint64_t bytes_;
    uint64_t written_ = 0;
    uint32_t crc_ = 0;  // crc32 of no bytes
    std::vector<char> buffer_;
  };

  FileBuilder(AtomicFile* file, std::string path) : file_(file), path_(std::move(path)) {}

  uint64_t size() const { return offset_; }

  // Writes `n` bytes now, at the end.
  absl::Status Literal(const void* data, size_t n) {
    PST_RETURN_IF_ERROR(file_->WriteAt(offset_, data, n));
    pieces_.push_back(Piece{n, ShardCrc32(static_cast<const char*>(data), n), true});
    offset_ += n;
    return absl::OkStatus();
  }
  absl::Status U32(uint32_t v) { return Literal(&v, sizeof(v)); }  // little-endian host
  absl::Status I64(int64_t v) { return Literal(&v, sizeof(v)); }

  // A tensor of `bytes` at the end: its length now, its payload through
  // the sink, and its crc32 when the sink finishes.
  absl::StatusOr<std::unique_ptr<Sink>> Tensor(uint64_t bytes) {
    PST_RETURN_IF_ERROR(Literal(&bytes, sizeof(bytes)));
    auto sink = std::make_unique<Sink>(this, pieces_.size(), offset_, bytes);
    pieces_.push_back(Piece{bytes, 0, false});
    offset_ += bytes;
    pieces_.push_back(Piece{4, 0, false});  // the payload's crc32
    offset_ += 4;
    return sink;
  }
  // A whole tensor of bytes held in memory.
  absl::Status WholeTensor(const void* data, uint64_t bytes) {
    PST_ASSIGN_OR_RETURN(std::unique_ptr<Sink> sink, Tensor(bytes));
    PST_RETURN_IF_ERROR(sink->Append(data, bytes));
    return sink->Finish();
  }

  // The crc32 of the pieces from `first` on (every one written).
  absl::StatusOr<uint32_t> CrcFrom(size_t first) const {
    uint32_t crc = 0;
    for (size_t i = first; i < pieces_.size(); ++i) {
      if (!pieces_[i].done) {
        return absl::InternalError(absl::StrCat("cannot write ", path_, ": a piece is unwritten"));
      }
      crc = Combine(crc, pieces_[i].crc, pieces_[i].bytes);
    }
    return crc;
  }
  size_t pieces() const { return pieces_.size(); }

 private:
  AtomicFile* file_;
  const std::string path_;
  uint64_t offset_ = 0;
  std::vector<Piece> pieces_;
};

absl::Status CheckRecordForWrite(const std::string& path, const ShardRecord& r) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": variable '", r.spec.name(), "': ", why));
  };
  absl::StatusOr<uint64_t> bytes = ShardFloatPayloadBytes(r.spec, r.rows);
  if (!bytes.ok()) return bad(bytes.status().message());
  const uint64_t elements = *bytes / sizeof(float);
  if (!r.removed_ids.empty() && !ShardSpecIsHash(r.spec)) {
    return bad("ids removed from a variable that is not hashed");
  }
  if (r.stream != nullptr) {
    if (!ShardSpecIsHash(r.spec)) return bad("rows streamed for a variable that is not hashed");
    if (r.rows != 0 || !r.values.empty() || !r.slots.empty() || !r.hash_ids.empty() ||
        !r.row_last.empty() || !r.row_count.empty()) {
      return bad("rows both streamed and held");
    }
    if (r.stream_slots < 0) return bad("a negative number of slots");
    return absl::OkStatus();
  }
  if (r.dense != nullptr) {
    if (ShardSpecIsHash(r.spec)) return bad("a dense source for a hashed variable");
    if (!r.values.empty() || !r.slots.empty()) return bad("values both held and from a source");
    if (r.dense_slots < 0) return bad("a negative number of slots");
    if (r.spec.shape_size() > 0 && r.rows != r.spec.shape(0)) {
      return bad(absl::StrCat(r.rows, " rows, but the shape is ", ShapeString(r.spec.shape())));
    }
    return absl::OkStatus();
  }
  if (!ShardSpecIsHash(r.spec) && r.spec.shape_size() > 0 && r.rows != r.spec.shape(0)) {
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
  const size_t want_ids = ShardSpecIsHash(r.spec) ? static_cast<size_t>(r.rows) : 0;
  if (r.hash_ids.size() != want_ids) {
    return bad(absl::StrCat(r.hash_ids.size(), " hash ids, expected ", want_ids));
  }
  if (r.row_last.size() != r.row_count.size() ||
      (!r.row_last.empty() && r.row_last.size() != want_ids)) {
    return bad(absl::StrCat(r.row_last.size(), " row entries and ", r.row_count.size(),
                            " counts, expected none or ", want_ids));
  }
  return absl::OkStatus();
}

// The extras after the row entries: the admission counts and the ids
// removed, each when the record has them.
uint32_t OtherExtras(const ShardRecord& r) {
  return (r.admission.empty() ? 0 : kShardAdmission) | (r.removed_ids.empty() ? 0 : kShardRemoved);
}
absl::Status WriteOtherExtras(const ShardRecord& r, uint32_t extras, FileBuilder* out) {
  if ((extras & kShardAdmission) != 0) {
    PST_RETURN_IF_ERROR(out->WholeTensor(r.admission.data(), r.admission.size()));
  }
  if ((extras & kShardRemoved) != 0) {
    PST_RETURN_IF_ERROR(
        out->WholeTensor(r.removed_ids.data(), r.removed_ids.size() * sizeof(int64_t)));
  }
  return absl::OkStatus();
}

// The tensors and extras of a record whose rows are held.
absl::Status WriteHeldRows(const ShardRecord& r, FileBuilder* out) {
  PST_RETURN_IF_ERROR(out->WholeTensor(r.values.data(), r.values.size() * sizeof(float)));
  for (const std::vector<float>& slot : r.slots) {
    PST_RETURN_IF_ERROR(out->WholeTensor(slot.data(), slot.size() * sizeof(float)));
  }
  const bool hash = ShardSpecIsHash(r.spec);
  if (hash) {
    PST_RETURN_IF_ERROR(
        out->WholeTensor(r.hash_ids.data(), r.hash_ids.size() * sizeof(int64_t)));
  }
  const uint32_t extras = (r.row_last.empty() ? 0 : kShardRowEntries) | OtherExtras(r);
  PST_RETURN_IF_ERROR(out->U32(extras));
  if ((extras & kShardRowEntries) != 0) {
    PST_RETURN_IF_ERROR(out->WholeTensor(r.row_last.data(), r.row_last.size() * sizeof(int64_t)));
    PST_RETURN_IF_ERROR(out->WholeTensor(r.row_count.data(), r.row_count.size() * sizeof(double)));
  }
  return WriteOtherExtras(r, extras, out);
}

// The tensors and extras of a dense record read from its source: the
// values and each slot, with the sizes its spec says.
absl::Status WriteSourcedRows(const std::string& path, const ShardRecord& r, FileBuilder* out) {
  PST_ASSIGN_OR_RETURN(const uint64_t bytes, ShardFloatPayloadBytes(r.spec, r.rows));
  PST_RETURN_IF_ERROR(r.dense->Read(
      [&](std::span<const float> values,
          const std::vector<std::span<const float>>& slots) -> absl::Status {
        if (values.size_bytes() != bytes || slots.size() != static_cast<size_t>(r.dense_slots)) {
          return absl::InternalError(absl::StrCat(
              "cannot write ", path, ": variable '", r.spec.name(), "': its source gave ",
              values.size(), " values and ", slots.size(), " slots, expected ",
              bytes / sizeof(float), " and ", r.dense_slots));
        }
        PST_RETURN_IF_ERROR(out->WholeTensor(values.data(), values.size_bytes()));
        for (const std::span<const float>& slot : slots) {
          if (slot.size_bytes() != bytes) {
            return absl::InternalError(absl::StrCat("cannot write ", path, ": variable '",
                                                    r.spec.name(), "': a slot of ", slot.size(),
                                                    " values from its source"));
          }
          PST_RETURN_IF_ERROR(out->WholeTensor(slot.data(), slot.size_bytes()));
        }
        return absl::OkStatus();
      }));
  return out->U32(0);  // no extras
}

// The tensors and extras of a record whose rows are streamed: every
// tensor's place is made first, then one pass over the stream fills them.
absl::Status WriteStreamedRows(const std::string& path, const ShardRecord& r, int64_t rows,
                               FileBuilder* out) {
  PST_ASSIGN_OR_RETURN(const uint64_t value_bytes, ShardFloatPayloadBytes(r.spec, rows));
  const uint64_t n = static_cast<uint64_t>(rows);
  std::vector<std::unique_ptr<FileBuilder::Sink>> floats;  // values, then each slot
  for (int i = 0; i <= r.stream_slots; ++i) {
    PST_ASSIGN_OR_RETURN(std::unique_ptr<FileBuilder::Sink> sink, out->Tensor(value_bytes));
    floats.push_back(std::move(sink));
  }
  PST_ASSIGN_OR_RETURN(std::unique_ptr<FileBuilder::Sink> ids, out->Tensor(n * sizeof(int64_t)));
  // Entries as a held record has them: none for no rows.
  const uint32_t extras = (rows > 0 && r.stream_entries ? kShardRowEntries : 0) | OtherExtras(r);
  PST_RETURN_IF_ERROR(out->U32(extras));
  std::unique_ptr<FileBuilder::Sink> lasts, counts;
  if ((extras & kShardRowEntries) != 0) {
    PST_ASSIGN_OR_RETURN(lasts, out->Tensor(n * sizeof(int64_t)));
    PST_ASSIGN_OR_RETURN(counts, out->Tensor(n * sizeof(double)));
  }
  PST_RETURN_IF_ERROR(WriteOtherExtras(r, extras, out));

  const size_t dim = rows > 0 ? static_cast<size_t>(value_bytes / n / sizeof(float)) : 0;
  const size_t width = dim * static_cast<size_t>(1 + r.stream_slots);
  int64_t given = 0;
  PST_RETURN_IF_ERROR(r.stream->ForEach([&](int64_t id, std::span<const float> row, int64_t last,
                                            double count) -> absl::Status {
    if (++given > rows || row.size() != width) {
      return absl::InternalError(absl::StrCat(
          "cannot write ", path, ": variable '", r.spec.name(), "': its stream gave ",
          given > rows ? absl::StrCat("more than the ", rows, " rows it counted")
                       : absl::StrCat("a row of ", row.size(), " floats, expected ", width)));
    }
    for (size_t t = 0; t < floats.size(); ++t) {
      PST_RETURN_IF_ERROR(floats[t]->Append(row.data() + t * dim, dim * sizeof(float)));
    }
    PST_RETURN_IF_ERROR(ids->Append(&id, sizeof(id)));
    if (lasts == nullptr) return absl::OkStatus();
    PST_RETURN_IF_ERROR(lasts->Append(&last, sizeof(last)));
    return counts->Append(&count, sizeof(count));
  }));
  if (given != rows) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": variable '", r.spec.name(),
                                            "': its stream gave ", given, " rows of the ", rows,
                                            " it counted"));
  }
  for (auto& sink : floats) PST_RETURN_IF_ERROR(sink->Finish());
  PST_RETURN_IF_ERROR(ids->Finish());
  if (lasts == nullptr) return absl::OkStatus();
  PST_RETURN_IF_ERROR(lasts->Finish());
  return counts->Finish();
}

}  // namespace

absl::Status WriteShardFile(const std::string& path, const std::vector<ShardRecord>& records,
                            proto::CheckpointShard* shard) {
  if (records.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", records.size(), " records is too many"));
  }
  for (const ShardRecord& r : records) PST_RETURN_IF_ERROR(CheckRecordForWrite(path, r));

  PST_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::Create(path));
  FileBuilder out(file.get(), path);
  PST_RETURN_IF_ERROR(out.Literal(kShardMagic, kShardTagBytes));
  PST_RETURN_IF_ERROR(out.U32(static_cast<uint32_t>(records.size())));
  // Records read from a dense source first: a copy-on-write snapshot's
  // pushes to a variable not written yet may wait for it (dense_snapshot.h),
  // so those go before the long tables.
  std::vector<const ShardRecord*> order;
  for (const ShardRecord& r : records) {
    if (r.dense != nullptr) order.push_back(&r);
  }
  for (const ShardRecord& r : records) {
    if (r.dense == nullptr) order.push_back(&r);
  }
  for (const ShardRecord* record : order) {
    const ShardRecord& r = *record;
    int64_t rows = r.rows;
    if (r.stream != nullptr) {
      PST_ASSIGN_OR_RETURN(rows, r.stream->Count());
      PST_RETURN_IF_ERROR(ShardFloatPayloadBytes(r.spec, rows).status());
    }
    const size_t first = out.pieces();
    const std::string header = r.spec.SerializeAsString();
    PST_RETURN_IF_ERROR(out.U32(static_cast<uint32_t>(header.size())));
    PST_RETURN_IF_ERROR(out.Literal(header.data(), header.size()));
    PST_RETURN_IF_ERROR(out.I64(r.version));
    PST_RETURN_IF_ERROR(out.I64(rows));
    const bool hash = ShardSpecIsHash(r.spec);
    const size_t slots = r.stream != nullptr  ? static_cast<size_t>(r.stream_slots)
                         : r.dense != nullptr ? static_cast<size_t>(r.dense_slots)
                                              : r.slots.size();
    PST_RETURN_IF_ERROR(out.U32(static_cast<uint32_t>(1 + slots + (hash ? 1 : 0))));
    if (r.stream != nullptr) {
      PST_RETURN_IF_ERROR(WriteStreamedRows(path, r, rows, &out));
    } else if (r.dense != nullptr) {
      PST_RETURN_IF_ERROR(WriteSourcedRows(path, r, &out));
    } else {
      PST_RETURN_IF_ERROR(WriteHeldRows(r, &out));
    }
    PST_ASSIGN_OR_RETURN(const uint32_t record_crc, out.CrcFrom(first));
    PST_RETURN_IF_ERROR(out.U32(record_crc));
  }
  PST_RETURN_IF_ERROR(out.Literal(kShardTrailer, kShardTagBytes));
  PST_ASSIGN_OR_RETURN(const uint32_t file_crc, out.CrcFrom(0));
  const int64_t bytes = static_cast<int64_t>(out.size());
  PST_RETURN_IF_ERROR(file->Commit());
  if (shard != nullptr) {
    shard->set_file(fs::path(path).filename().string());
    shard->set_bytes(bytes);
    shard->set_crc32(file_crc);
  }
  return absl::OkStatus();
}

absl::Status MaterializeDense(std::vector<ShardRecord>* records) {
  for (ShardRecord& r : *records) {
    if (r.dense == nullptr) continue;
    PST_RETURN_IF_ERROR(r.dense->Read(
        [&](std::span<const float> values,
            const std::vector<std::span<const float>>& slots) -> absl::Status {
          r.values.assign(values.begin(), values.end());
          r.slots.clear();
          for (const std::span<const float>& slot : slots) {
            r.slots.emplace_back(slot.begin(), slot.end());
          }
          return absl::OkStatus();
        }));
    r.dense.reset();
    r.dense_slots = 0;
  }
  return absl::OkStatus();
}

}  // namespace pst::common
