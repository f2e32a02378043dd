#include "common/safe_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

std::string DirectoryOf(const std::string& path) {
  std::string dir = fs::path(path).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

// A name no other writer uses: pid, a per-process counter and random bits.
std::string UniqueTempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrCat(fs::path(path).filename().string(), ".tmp-", getpid(), "-", counter++, "-",
                      random() % 1000000000);
}

}  // namespace

absl::Status OsError(absl::string_view what, const std::string& path, int err) {
  const std::string message = absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::StatusOr<int> OpenRegularFileForRead(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    if (err == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is a symbolic link; checkpoint files are never read through one"));
    }
    return OsError("open", path, err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return OsError("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a regular file (a directory?)"));
  }
  return fd;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  absl::StatusOr<int> opened = OpenRegularFileForRead(path);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  std::string data;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return OsError("read", path, err);
    }
    if (n == 0) break;
    data.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return OsError("open directory", dir, errno);
  if (::fsync(dfd) != 0) {
    const int err = errno;
    ::close(dfd);
    return OsError("fsync directory", dir, err);
  }
  ::close(dfd);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AtomicFile>> AtomicFile::Create(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dfd < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": ", dir, " is not a directory (or is a link)"));
    }
    return OsError(absl::StrCat("open the directory ", dir, " to write"), path, err);
  }
  std::string tmp = UniqueTempName(path);
  const int fd =
      ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    ::close(dfd);
    return OsError("create", absl::StrCat(dir, "/", tmp), err);
  }
  return std::unique_ptr<AtomicFile>(new AtomicFile(path, dir, std::move(tmp), dfd, fd));
}

AtomicFile::AtomicFile(std::string path, std::string dir, std::string tmp, int dfd, int fd)
    : path_(std::move(path)), dir_(std::move(dir)), tmp_(std::move(tmp)), dfd_(dfd), fd_(fd) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlinkat(dfd_, tmp_.c_str(), 0);
  ::close(dfd_);
}

std::string AtomicFile::temp_path() const { return absl::StrCat(dir_, "/", tmp_); }

absl::Status AtomicFile::WriteAt(uint64_t offset, const void* data, size_t n) {
  if (fd_ < 0 || committed_) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path_, ": already closed"));
  }
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return OsError("write", temp_path(), errno);
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (fd_ < 0 || committed_) {
    return absl::FailedPreconditionError(absl::StrCat("cannot commit ", path_, ": already closed"));
  }
  if (::fsync(fd_) != 0) return OsError("fsync", temp_path(), errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return OsError("close", temp_path(), errno);
  // rename replaces whatever `path` names, a link included, without
  // following it.
  const std::string name = fs::path(path_).filename().string();
  if (::renameat(dfd_, tmp_.c_str(), dfd_, name.c_str()) != 0) {
    return OsError("rename", temp_path(), errno);
  }
  committed_ = true;
  if (::fsync(dfd_) != 0) return OsError("fsync directory", dir_, errno);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  absl::Status s = (*file)->WriteAt(0, contents.data(), contents.size());
  if (!s.ok()) return s;
  return (*file)->Commit();
}

absl::Status MakeDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return OsError("create", dir, errno);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return OsError("stat", dir, errno);
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is a symbolic link; checkpoints are never written through one"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace pst::common
