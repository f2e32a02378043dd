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

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
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
  const std::string tmp = UniqueTempName(path);
  const std::string tmp_path = absl::StrCat(dir, "/", tmp);
  const int fd =
      ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    ::close(dfd);
    return OsError("create", tmp_path, err);
  }
  auto fail = [&](absl::string_view what, int err) {
    ::unlinkat(dfd, tmp.c_str(), 0);
    ::close(dfd);
    return OsError(what, tmp_path, err);
  };
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return fail("write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return fail("fsync", err);
  }
  if (::close(fd) != 0) return fail("close", errno);
  // rename replaces whatever `path` names, a link included, without
  // following it.
  const std::string name = fs::path(path).filename().string();
  if (::renameat(dfd, tmp.c_str(), dfd, name.c_str()) != 0) return fail("rename", errno);
  if (::fsync(dfd) != 0) {
    const int err = errno;
    ::close(dfd);
    return OsError("fsync directory", dir, err);
  }
  ::close(dfd);
  return absl::OkStatus();
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
