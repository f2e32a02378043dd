// RecordStream: the lines of one worker's share of the input (an
// InputShare, data/input_files.h), read in order through a LineSource
// (data/line_source.h), optionally shuffled in blocks by a ShuffleBuffer
// (data/shuffle_buffer.h), over one or more epochs, with a Position that
// resumes the stream exactly.
//
// Order. The stream reads the share's pieces in order into the buffer until
// it holds buffer_size lines or the epoch's input ends; that block is
// shuffled (when options.shuffle) with a seed derived from (seed, epoch,
// where the block's first line starts) and handed out; then the next block
// is read. A block never spans two epochs. Without shuffle the lines come in
// input order. Two streams with the same share and options hand out the same
// lines in the same order; the order changes from one epoch to the next.
// This is a block shuffle, not tf.data's sliding buffer: a line moves at
// most buffer_size - 1 places, and the state to rebuild is one block.
//
// Positions. position() is the place of the next line to come:
//   epoch, piece  the epoch and the index of the piece where the current
//                 block's first line is (or where reading goes on when the
//                 block is used up);
//   offset, line  that line's byte offset in the file (in the decompressed
//                 text for gzip; -1: the start of the piece's range) and its
//                 index in the piece's range;
//   emitted       how many of the block's lines were already handed out.
// Opening a stream at a position re-reads that block from (piece, offset),
// shuffles it with the same seed, and drops `emitted` lines: it then hands
// out exactly the lines the original stream would have handed out next. A
// position is meaningful only for the share and options it came from (the
// same files, worker, worker count, buffer_size, shuffle and seed): it
// carries a fingerprint of them,
//   reader        a 64-bit hash of the share's pieces and those options,
// and a stream refuses a position with another fingerprint (0: unchecked).
// The files' contents are not in it: a file changed in place is not seen.
// Serialized as the text "epoch:piece:offset:line:emitted:reader".
//
// Memory: buffer_size lines plus one LineSource's buffer, whatever the
// input's size. Owned by one reader; not thread-safe.
#ifndef PST_DATA_RECORD_STREAM_H_
#define PST_DATA_RECORD_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/input_files.h"
#include "data/line_source.h"
#include "data/shuffle_buffer.h"

namespace pst::data {

struct StreamOptions {
  int64_t buffer_size = 1024;  // lines per block, >= 1
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t num_epochs = 1;  // 0: read on forever
};

// See the top of this file. The default is the start of epoch 0.
struct Position {
  int64_t epoch = 0;
  int64_t piece = 0;
  int64_t offset = -1;
  int64_t line = 0;
  int64_t emitted = 0;
  uint64_t reader = 0;

  std::string ToString() const;
  // Errors: InvalidArgument for text that ToString did not write.
  static absl::StatusOr<Position> Parse(absl::string_view text);
  bool operator==(const Position&) const = default;
};

class RecordStream {
 public:
  // Opens the stream at `at` (by default the start). Errors: InvalidArgument
  // for options out of range, or a position that does not fit the share
  // (a piece index past its end, or more lines emitted than its block
  // holds); FailedPrecondition for a position saved by a stream of another
  // share or options (its fingerprint differs); those of LineSource::Open
  // and Next for the first block.
  static absl::StatusOr<std::unique_ptr<RecordStream>> Open(InputShare share,
                                                            const StreamOptions& options,
                                                            const Position& at = Position());

  // Hands out the next line into *out: true, or false once the last epoch
  // is over (or at once when an epoch of the share holds no line). Errors:
  // those of LineSource; after an error every call returns it again.
  absl::StatusOr<bool> Next(Record* out);

  // Where the next line comes from (see the top of this file).
  Position position() const;

  // The fingerprint of a share and options (Position::reader); never 0.
  static uint64_t Fingerprint(const InputShare& share, const StreamOptions& options);

  const InputShare& share() const { return share_; }
  // The current block (for tests: it never holds more than buffer_size).
  const ShuffleBuffer& buffer() const { return buffer_; }

 private:
  RecordStream(InputShare share, const StreamOptions& options);

  // Opens piece `piece` at (offset, line) as the current source.
  absl::Status OpenPiece(int64_t piece, int64_t offset, int64_t line);
  // Reads the next block into the buffer and shuffles it; moves to the next
  // epoch at the end of one; sets done_ when there is nothing more.
  absl::Status Refill();
  uint64_t BlockSeed() const;

  const InputShare share_;
  const StreamOptions options_;
  const uint64_t fingerprint_;
  ShuffleBuffer buffer_;
  std::unique_ptr<LineSource> source_;
  int64_t piece_ = 0;  // the source's piece
  int64_t epoch_ = 0;
  // Where the current block's first line is.
  int64_t block_piece_ = 0;
  int64_t block_offset_ = 0;
  int64_t block_line_ = 0;
  // The current epoch was read from its start and has yielded this many
  // lines so far (to stop on an empty share rather than loop).
  bool epoch_from_start_ = false;
  int64_t epoch_lines_ = 0;
  bool done_ = false;
  absl::Status status_;
  std::string scratch_;
};

}  // namespace pst::data

#endif  // PST_DATA_RECORD_STREAM_H_
