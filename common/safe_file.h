// File operations for checkpoints that never follow a symbolic link planted
// where a file or a checkpoint directory belongs, and never write through a
// name another process chose.
//
// Paths name a directory the operator configured (a --checkpoint_dir,
// which may itself be a link: that is the operator's choice) plus names
// below it; the last component of every path opened here must not be a
// symbolic link (O_NOFOLLOW), and a temp file is created fresh with a
// unique name (O_CREAT | O_EXCL) before it is renamed into place.
//
// Thread-safety: pure functions of their arguments and the files.
#ifndef PST_COMMON_SAFE_FILE_H_
#define PST_COMMON_SAFE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pst::common {

// Opens `path` for reading: a regular file, not a symbolic link. Returns
// the descriptor (the caller closes it). Errors: NotFound when absent;
// FailedPrecondition for a symbolic link; DataLoss for anything else that
// is not a regular file (a directory);
// Internal for other OS errors. Messages name the path.
absl::StatusOr<int> OpenRegularFileForRead(const std::string& path);

// Reads the whole of `path` (as OpenRegularFileForRead opens it).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Writes `contents` to a new, uniquely named temp file beside `path`,
// fsyncs it, renames it onto `path` and fsyncs the directory. The directory
// must not be a symbolic link. Errors: Internal (ResourceExhausted when the
// disk is full) naming the path and the OS error; the temp file is removed.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// A file written piece by piece, at any offsets, into a new, uniquely named
// temp file beside `path`, then put in place by Commit as
// WriteFileAtomically does: a writer streams a file of any size without
// holding it. Destroyed before Commit succeeds, it removes the temp file.
// Thread-compatible.
class AtomicFile {
 public:
  // Creates the temp file. Errors: as WriteFileAtomically's.
  static absl::StatusOr<std::unique_ptr<AtomicFile>> Create(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Writes `n` bytes at `offset` (a hole before it reads as zeros).
  // Errors: Internal or ResourceExhausted (disk full) naming the temp file.
  absl::Status WriteAt(uint64_t offset, const void* data, size_t n);
  // fsyncs the temp file, renames it onto the path and fsyncs the
  // directory. Errors: as WriteAt's; nothing can be written after.
  absl::Status Commit();

 private:
  AtomicFile(std::string path, std::string dir, std::string tmp, int dfd, int fd);
  std::string temp_path() const;

  const std::string path_;
  const std::string dir_;
  const std::string tmp_;  // its name in dir_
  const int dfd_;          // dir_, opened
  int fd_;                 // the temp file; -1 once closed
  bool committed_ = false;
};

// Creates directory `dir` (its parent must exist) unless it exists; an
// existing one must be a real directory, not a symbolic link. Errors:
// FailedPrecondition for a link or a non-directory; Internal otherwise.
absl::Status MakeDirectory(const std::string& dir);

// fsyncs directory `dir` (so entries created or removed in it are durable).
absl::Status FsyncDirectory(const std::string& dir);

// The status for OS error `err` while doing `what` to `path`: ResourceExhausted
// for ENOSPC and EDQUOT, Internal otherwise.
absl::Status OsError(absl::string_view what, const std::string& path, int err);

}  // namespace pst::common

#endif  // PST_COMMON_SAFE_FILE_H_
