// TensorBoard event files: scalars a chief writes with --summary_dir, read
// by TensorBoard as it reads TensorFlow's.
//
// A file is a sequence of TFRecords, each
//   uint64 length | uint32 masked CRC32C of the length | data | uint32 masked CRC32C of data
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), whose
// data is a serialized tensorboard.Event; the first one carries
// file_version "brain.Event:2". Files are named
// events.out.tfevents.<unix seconds>.<host>, which TensorBoard looks for.
//
// Thread-safety: an EventWriter is used by one thread at a time.
#ifndef PST_COMMON_EVENT_WRITER_H_
#define PST_COMMON_EVENT_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pst::common {

// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
// The masked form TFRecords store.
uint32_t MaskedCrc32c(const void* data, size_t size);

class EventWriter {
 public:
  // Creates a new event file in `dir` (made if missing) and writes its
  // file_version event. Errors: Internal naming the path.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Open(const std::string& dir);

  const std::string& path() const { return path_; }

  // One event at `step` holding every (tag, value) as a scalar.
  absl::Status AddScalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars,
                          absl::Time wall_time = absl::Now());
  // Pushes what was written to the file (TensorBoard reads while we write).
  absl::Status Flush();

 private:
  EventWriter(std::string path, std::ofstream out) : path_(std::move(path)), out_(std::move(out)) {}
  absl::Status WriteRecord(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

// The records of a TFRecord file, each checked against both its CRCs.
// Errors: NotFound for an unreadable file; DataLoss naming the byte offset
// of a truncated record or a CRC mismatch.
absl::StatusOr<std::vector<std::string>> ReadRecords(const std::string& path);

}  // namespace pst::common

#endif  // PST_COMMON_EVENT_WRITER_H_
