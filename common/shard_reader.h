// Reads a checkpoint shard file (format: common/checkpoint_format.h) one
// record at a time, checking every checksum as it goes. It holds one
// record and a small buffer, never the file: a restore keeps only what its
// ps needs from each record, whatever the checkpoint's size. No length
// read from the file is trusted before it is checked against the spec and
// against the bytes the file has left, so a corrupt file cannot make it
// allocate more than the file holds.
//
// Thread-compatible: one thread at a time.
#ifndef PST_COMMON_SHARD_READER_H_
#define PST_COMMON_SHARD_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"

namespace pst::common {

// Where a hash record's row tensors lie in its file, for ShardReader::
// ReadRows: the payload offset and stored crc32 of the values, each slot,
// the ids, and (with row entries) each row's last update and count.
struct ShardRowsLayout {
  int64_t rows = 0;
  int64_t dim = 0;
  int slots = 0;
  bool entries = false;
  std::vector<uint64_t> offsets;  // values, slots..., ids[, last, count]
  std::vector<uint32_t> crcs;     // each one's stored crc32
};

// Rows [first, first + n) of a record, each tensor's part of them.
struct ShardRowChunk {
  int64_t first = 0;
  int64_t n = 0;
  int64_t dim = 0;
  const int64_t* ids = nullptr;
  const float* values = nullptr;             // [n, dim]
  std::vector<const float*> slots;           // each [n, dim]
  const int64_t* last = nullptr;             // [n], or null without entries
  const double* count = nullptr;             // [n], or null without entries
};

class ShardReader {
 public:
  // Opens `path` (never through a symbolic link) and reads its header.
  // Errors: as OpenRegularFileForRead (NotFound for a missing file);
  // DataLoss for a bad magic or a truncated header.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(const std::string& path);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // The file's size when it was opened, and the records it says it holds.
  int64_t file_bytes() const { return file_bytes_; }
  uint32_t record_count() const { return record_count_; }

  // Whether a record's tensors are wanted, from its spec.
  using KeepTensors = std::function<bool(const proto::VariableSpec&)>;

  // Reads the next record into `*record` and returns true, or checks the
  // trailer and the end of the file and returns false once every record
  // was read. A record `keep` refuses is checked all the same, every
  // checksum included, through a small buffer, and comes back with its
  // spec, version and rows but no tensors (values, slots and hash_ids
  // empty): a reader that skips what it does not hold needs memory for
  // what it keeps only. No `keep`: every record whole.
  // Errors: DataLoss naming the file and the record (and its variable when
  // known) for a truncated file, a checksum mismatch, sizes that do not
  // match the spec, or bytes after the trailer.
  //
  // `layout`, when given, is filled for a hash record `keep` refuses (and
  // cleared for any other), so that its rows can be read after all with
  // ReadRows: a record too big to hold is checked whole by Next first, then
  // read in chunks.
  absl::StatusOr<bool> Next(ShardRecord* record, const KeepTensors& keep = nullptr,
                            ShardRowsLayout* layout = nullptr);

  // Reads the rows of a record Next laid out, in chunks of about 1 MiB a
  // tensor, in order, and calls `fn` on each (its pointers valid during the
  // call). Every tensor's crc32 is checked again at its end; `fn` may have
  // been given rows before a mismatch is found, so a caller keeps nothing
  // until ReadRows returned OK. Stops at `fn`'s first error.
  // Errors: DataLoss naming the file when a checksum no longer matches (the
  // file changed since Next) or it was cut short; Internal for a read error.
  absl::Status ReadRows(const ShardRowsLayout& layout,
                        absl::FunctionRef<absl::Status(const ShardRowChunk&)> fn);

  // After Next returned false: the crc32 of the whole file.
  uint32_t file_crc32() const { return file_crc_; }

 private:
  ShardReader(int fd, std::string path, int64_t file_bytes);

  // Reads one tensor of exactly `bytes` into `out` (resized), or through
  // the small buffer when not `keeping`; checks its crc32.
  // With `layout`, notes the payload's offset and stored crc32 there.
  template <typename T>
  absl::Status ReadTensor(std::vector<T>* out, uint64_t bytes, bool keeping,
                          const std::string& what, ShardRowsLayout* layout = nullptr);
  // Reads exactly `n` bytes into `out`, adding them to the file's (and,
  // while in a record, the record's) checksum.
  absl::Status Read(void* out, uint64_t n, const std::string& what);
  // Reads `n` bytes through a small buffer and returns their crc32.
  absl::StatusOr<uint32_t> Skip(uint64_t n, const std::string& what);
  uint64_t remaining() const { return static_cast<uint64_t>(file_bytes_) - offset_; }
  absl::Status Loss(const std::string& why) const;

  const int fd_;
  const std::string path_;
  const int64_t file_bytes_;
  uint64_t offset_ = 0;
  std::vector<char> buffer_;
  std::vector<char> scratch_;  // Skip's
  size_t buffer_pos_ = 0;
  size_t buffer_len_ = 0;
  uint32_t file_crc_ = 0;
  uint32_t record_crc_ = 0;
  bool in_record_ = false;
  uint32_t record_count_ = 0;
  int format_ = 2;  // the file's version: 1 has no table extras
  uint32_t records_read_ = 0;
  bool finished_ = false;
};

}  // namespace pst::common

#endif  // PST_COMMON_SHARD_READER_H_
