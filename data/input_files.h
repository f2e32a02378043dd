// The input of a streaming reader (data/record_stream.h) and the share of it
// that one worker reads.
//
// An input spec is a list of items; each item is a file, a directory (its
// regular files whose names do not start with '.', not recursing), or a glob
// pattern (an item with '*', '?' or '[': glob(3)). The files of all items
// are sorted by path and deduplicated. A file whose name ends in ".gz" is
// read through zlib; any other file is plain text.
//
// The share of worker i of W (InputShareOf):
//   - at least W files: the files j with j % W == i, each read whole;
//   - fewer files than workers: every worker reads every file, but only its
//     part of it: for a plain file, the byte range
//     [size * i / W, size * (i + 1) / W), which owns the lines that *start*
//     inside it (a line that straddles the end belongs to the range where it
//     starts); for a .gz file, where a byte range cannot be found without
//     decompressing, the lines with index % W == i (every worker decompresses
//     the whole file and keeps one line in W: correct but W times the CPU, so
//     give a .gz input as at least W files where that matters).
// Either way every line is read by exactly one worker, and no worker reads
// a file outside its share.
//
// Functions only: no shared state, safe from any thread.
#ifndef PST_DATA_INPUT_FILES_H_
#define PST_DATA_INPUT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pst::data {

// One file, or the part of it that one worker reads.
struct FilePiece {
  std::string path;
  bool gzip = false;  // path ends in ".gz"
  // The byte range whose line starts this piece owns: [begin, end), end -1
  // meaning the end of the file. For gzip, offsets are into the
  // decompressed text and the range is always the whole file.
  int64_t begin = 0;
  int64_t end = -1;
  // Of the lines in the range, the piece keeps those whose index (from 0,
  // counting every line of the range) is phase modulo stride.
  int64_t stride = 1;
  int64_t phase = 0;

  bool operator==(const FilePiece&) const = default;
};

// What one worker reads, in order.
struct InputShare {
  std::vector<FilePiece> pieces;
};

// Splits a comma-separated spec ("a.txt,dir/,part-*.gz") into items; empty
// items are dropped.
std::vector<std::string> SplitInputSpec(absl::string_view spec);

// The sorted, deduplicated files of `items`. Errors: InvalidArgument for no
// items; NotFound naming the item for a missing path, a glob that matches
// no file, or a directory without files; the errno code naming the path
// when it cannot be examined.
absl::StatusOr<std::vector<std::string>> ListInputFiles(const std::vector<std::string>& items);

// The share of worker `worker` of `num_workers` (see the top of this file).
// Looks up the sizes of plain files when it splits them. Errors:
// InvalidArgument for num_workers < 1 or worker outside [0, num_workers),
// or no files; the errno code naming a file whose size cannot be read.
absl::StatusOr<InputShare> InputShareOf(const std::vector<std::string>& files, int worker,
                                        int num_workers);

}  // namespace pst::data

#endif  // PST_DATA_INPUT_FILES_H_
