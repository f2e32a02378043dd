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

#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"

namespace pst::common {

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
  absl::StatusOr<bool> Next(ShardRecord* record, const KeepTensors& keep = nullptr);

  // After Next returned false: the crc32 of the whole file.
  uint32_t file_crc32() const { return file_crc_; }

 private:
  ShardReader(int fd, std::string path, int64_t file_bytes);

  // Reads one tensor of exactly `bytes` into `out` (resized), or through
  // the small buffer when not `keeping`; checks its crc32.
  template <typename T>
  absl::Status ReadTensor(std::vector<T>* out, uint64_t bytes, bool keeping,
                          const std::string& what);
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
