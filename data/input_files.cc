#include "data/input_files.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pst::data {
namespace {

namespace fs = std::filesystem;

bool IsGlob(absl::string_view item) { return item.find_first_of("*?[") != absl::string_view::npos; }

absl::Status AddGlob(const std::string& pattern, std::vector<std::string>* files) {
  glob_t matches = {};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  absl::Status status;
  if (rc == GLOB_NOMATCH) {
    status = absl::NotFoundError(absl::StrCat("no input file matches ", pattern));
  } else if (rc != 0) {
    status = absl::UnavailableError(absl::StrCat("cannot expand input pattern ", pattern));
  } else {
    int64_t added = 0;
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      std::error_code ec;
      if (fs::is_regular_file(matches.gl_pathv[i], ec)) {
        files->push_back(matches.gl_pathv[i]);
        ++added;
      }
    }
    if (added == 0) {
      status = absl::NotFoundError(absl::StrCat("no input file matches ", pattern));
    }
  }
  ::globfree(&matches);
  return status;
}

absl::Status AddDirectory(const std::string& dir, std::vector<std::string>* files) {
  std::error_code ec;
  int64_t added = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(".")) continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    files->push_back(it->path().string());
    ++added;
  }
  if (ec) {
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("cannot list input directory ", dir));
  }
  if (added == 0)
    return absl::NotFoundError(absl::StrCat("input directory ", dir, " has no files"));
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SplitInputSpec(absl::string_view spec) {
  return absl::StrSplit(spec, ',', absl::SkipEmpty());
}

absl::StatusOr<std::vector<std::string>> ListInputFiles(const std::vector<std::string>& items) {
  if (items.empty()) return absl::InvalidArgumentError("no input files given");
  std::vector<std::string> files;
  for (const std::string& item : items) {
    if (IsGlob(item)) {
      if (absl::Status s = AddGlob(item, &files); !s.ok()) return s;
      continue;
    }
    struct stat st;
    errno = 0;
    if (::stat(item.c_str(), &st) != 0) {
      const int saved = errno;
      return absl::ErrnoToStatus(saved, absl::StrCat("cannot open input ", item));
    }
    if (S_ISDIR(st.st_mode)) {
      if (absl::Status s = AddDirectory(item, &files); !s.ok()) return s;
    } else {
      files.push_back(item);
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

absl::StatusOr<InputShare> InputShareOf(const std::vector<std::string>& files, int worker,
                                        int num_workers) {
  if (num_workers < 1 || worker < 0 || worker >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", worker, " of ", num_workers, " is not a valid share"));
  }
  if (files.empty()) return absl::InvalidArgumentError("no input files given");
  InputShare share;
  const int64_t w = num_workers;
  if (static_cast<int64_t>(files.size()) >= w) {
    for (size_t j = static_cast<size_t>(worker); j < files.size(); j += static_cast<size_t>(w)) {
      FilePiece piece;
      piece.path = files[j];
      piece.gzip = absl::EndsWith(piece.path, ".gz");
      share.pieces.push_back(std::move(piece));
    }
    return share;
  }
  for (const std::string& path : files) {
    FilePiece piece;
    piece.path = path;
    piece.gzip = absl::EndsWith(path, ".gz");
    if (piece.gzip) {
      piece.stride = w;
      piece.phase = worker;
    } else {
      struct stat st;
      errno = 0;
      if (::stat(path.c_str(), &st) != 0) {
        const int saved = errno;
        return absl::ErrnoToStatus(saved, absl::StrCat("cannot open input ", path));
      }
      const int64_t size = st.st_size;
      // size * i / W without overflow for any file size.
      auto bound = [size, w](int64_t i) {
        return static_cast<int64_t>(static_cast<__int128>(size) * i / w);
      };
      piece.begin = bound(worker);
      piece.end = bound(worker + 1);
    }
    share.pieces.push_back(std::move(piece));
  }
  return share;
}

}  // namespace pst::data
