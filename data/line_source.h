// LineSource: the lines of one FilePiece (data/input_files.h), plain or
// gzip, read through a fixed-size buffer, with the byte offset and index of
// each line so that a reader can stop and later reopen at an exact line.
//
// A piece owns the lines that start in [begin, end) (offsets into the
// decompressed text for gzip). Opened at the start of its range, a source
// whose range begins past 0 first skips the rest of the line that straddles
// `begin` (it belongs to the range before). Opened at a saved (offset,
// line) — values that next_offset() and next_line() returned — it goes on
// exactly where that source was. A line is handed out without its '\n'
// ('\r' is left for the parser); a last line without '\n' is a line; the
// empty text after a final '\n' is not.
//
// Memory: the I/O buffer plus the longest line. Owned by one reader; not
// thread-safe.
#ifndef PST_DATA_LINE_SOURCE_H_
#define PST_DATA_LINE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/input_files.h"

namespace pst::data {

class LineSource {
 public:
  // The I/O buffer's size.
  static constexpr size_t kBufferSize = size_t{1} << 16;

  // Opens `piece` at the start of its range (offset < 0) or at a line start
  // `offset` after `line` lines of the range. A plain file seeks there; a
  // gzip file has no index to seek with, so it is decompressed (and the
  // text dropped) from its start up to `offset`: reopening far into a big
  // .gz file costs as much CPU as reading up to there. Errors: the errno code naming
  // the file when it cannot be opened; DataLoss naming a .gz file that is
  // not gzip data or that cannot be decompressed up to `offset`, or a plain
  // file that cannot be read.
  static absl::StatusOr<std::unique_ptr<LineSource>> Open(const FilePiece& piece,
                                                          int64_t offset = -1, int64_t line = 0);

  virtual ~LineSource() = default;

  // Reads the next line of the piece (skipping those of other phases) into
  // *text: true, or false at the end of the range. Then line_offset() and
  // line_index() describe that line. Errors: DataLoss naming the file and
  // line when reading or decompressing fails.
  virtual absl::StatusOr<bool> Next(std::string* text) = 0;

  // Where the last line handed out starts, and its index in the range.
  int64_t line_offset() const { return line_offset_; }
  int64_t line_index() const { return line_index_; }
  // Where reading goes on: pass these to Open to resume after the last line
  // handed out.
  int64_t next_offset() const { return next_offset_; }
  int64_t next_line() const { return next_line_; }

  // The 1-based line number in the whole file of the line of the range
  // that starts at `offset` with index `line`: for a range from 0 it is
  // line + 1; otherwise the file's lines before `offset` are counted (only
  // for error messages). Returns 0 when the file cannot be read.
  static int64_t FileLineNumber(const FilePiece& piece, int64_t offset, int64_t line);

 protected:
  LineSource() = default;

  int64_t line_offset_ = 0;
  int64_t line_index_ = 0;
  int64_t next_offset_ = 0;
  int64_t next_line_ = 0;
};

}  // namespace pst::data

#endif  // PST_DATA_LINE_SOURCE_H_
