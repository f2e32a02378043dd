#include "data/mnist_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace pst::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr int kNumClasses = 10;
// Bytes asked of gzread at a time; the buffer grows only as data arrives, so
// a header that claims more than the file holds cannot force a huge
// allocation up front.
constexpr size_t kReadChunk = size_t{1} << 20;

// Closes a gzFile when it goes out of scope.
class GzCloser {
 public:
  explicit GzCloser(gzFile file) : file_(file) {}
  GzCloser(const GzCloser&) = delete;
  GzCloser& operator=(const GzCloser&) = delete;
  ~GzCloser() {
    if (file_ != nullptr) gzclose(file_);
  }

 private:
  gzFile file_;
};

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// The file to read for `base`: `base` itself if it exists, else `base`.gz.
absl::StatusOr<std::string> ResolvePath(const std::string& base) {
  if (FileExists(base)) return base;
  const std::string gz = base + ".gz";
  if (FileExists(gz)) return gz;
  return absl::NotFoundError(
      absl::StrCat("dataset file not found: ", gz, " (nor ", base,
                   "); install Debian's dataset-fashion-mnist package or pass --data_dir"));
}

// The status for a read of `path` that came up short or failed: `saved_errno`
// is errno just after the gzread, `what` says what was missing.
absl::Status ReadError(gzFile file, const std::string& path, int saved_errno,
                       absl::string_view what) {
  int errnum = Z_OK;
  const char* message = gzerror(file, &errnum);
  if (errnum == Z_ERRNO) {
    return absl::ErrnoToStatus(saved_errno, absl::StrCat("error reading ", path));
  }
  if (errnum == Z_OK || errnum == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", what));
  }
  // zlib's message starts with the path; do not repeat it.
  return absl::DataLossError(
      absl::StrCat(path, " is corrupt: ", absl::StripPrefix(message, absl::StrCat(path, ": "))));
}

// Appends exactly `n` bytes from `file` to `out`; `what` names them in errors.
absl::Status ReadExactly(gzFile file, const std::string& path, size_t n, absl::string_view what,
                         std::vector<uint8_t>* out) {
  size_t got = 0;
  while (got < n) {
    const size_t ask = std::min(kReadChunk, n - got);
    const size_t old_size = out->size();
    out->resize(old_size + ask);
    const int read = gzread(file, out->data() + old_size, static_cast<unsigned>(ask));
    const int saved_errno = errno;
    if (read <= 0) {
      out->resize(old_size);
      return ReadError(file, path, saved_errno,
                       absl::StrCat("expected ", n, " bytes of ", what, ", found ", got));
    }
    out->resize(old_size + static_cast<size_t>(read));
    got += static_cast<size_t>(read);
  }
  return absl::OkStatus();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxFile {
  std::vector<int> dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file of unsigned bytes with the given magic number (whose low
// byte is the number of dimensions), checking that it holds exactly the
// bytes its header declares.
absl::StatusOr<IdxFile> ReadIdx(const std::string& path, uint32_t magic) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int saved_errno = errno;
    if (saved_errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("dataset file not found: ", path,
                       "; install Debian's dataset-fashion-mnist package or pass --data_dir"));
    }
    return absl::ErrnoToStatus(saved_errno, absl::StrCat("cannot open ", path));
  }
  GzCloser closer(file);
  gzbuffer(file, 1 << 17);

  std::vector<uint8_t> header;
  PST_RETURN_IF_ERROR(ReadExactly(file, path, 4, "header", &header));
  const uint32_t found_magic = BigEndian32(header.data());
  if (found_magic != magic) {
    return absl::DataLossError(
        absl::StrFormat("%s: bad magic number 0x%08x, expected 0x%08x", path, found_magic, magic));
  }
  const int num_dims = static_cast<int>(magic & 0xff);
  PST_RETURN_IF_ERROR(
      ReadExactly(file, path, 4 * static_cast<size_t>(num_dims), "header dimensions", &header));

  IdxFile idx;
  uint64_t total = 1;
  for (int i = 0; i < num_dims; ++i) {
    const uint32_t d = BigEndian32(header.data() + 4 * (i + 1));
    if (d > static_cast<uint32_t>(INT_MAX)) {
      return absl::DataLossError(absl::StrCat(path, ": dimension ", i, " is too large (", d, ")"));
    }
    if (d == 0 && i > 0) {
      return absl::DataLossError(absl::StrCat(path, ": dimension ", i, " is zero"));
    }
    idx.dims.push_back(static_cast<int>(d));
    total *= d;
    // Bounds the product, which also keeps every later index within int.
    if (total > static_cast<uint64_t>(INT_MAX)) {
      return absl::DataLossError(
          absl::StrCat(path, ": implausible dimensions, more than ", INT_MAX, " bytes of data"));
    }
  }

  PST_RETURN_IF_ERROR(ReadExactly(file, path, static_cast<size_t>(total), "data", &idx.data));
  // The declared size must be the whole file. Reading past it also makes
  // zlib check a gzip member's trailer (CRC and length).
  uint8_t extra = 0;
  const int read = gzread(file, &extra, 1);
  const int saved_errno = errno;
  if (read > 0) {
    return absl::DataLossError(absl::StrCat(path, " has trailing bytes after the ", total,
                                            " data bytes its header declares"));
  }
  int errnum = Z_OK;
  gzerror(file, &errnum);
  if (read < 0 || errnum != Z_OK) {
    return ReadError(file, path, saved_errno, "gzip trailer missing");
  }
  return idx;
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string base = dir.empty() ? std::string(".") : dir;
  PST_ASSIGN_OR_RETURN(const std::string images_path,
                       ResolvePath(absl::StrCat(base, "/", prefix, "-images-idx3-ubyte")));
  PST_ASSIGN_OR_RETURN(const std::string labels_path,
                       ResolvePath(absl::StrCat(base, "/", prefix, "-labels-idx1-ubyte")));

  PST_ASSIGN_OR_RETURN(IdxFile labels, ReadIdx(labels_path, kLabelsMagic));
  PST_ASSIGN_OR_RETURN(IdxFile images, ReadIdx(images_path, kImagesMagic));
  if (images.dims[0] != labels.dims[0]) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", images.dims[0], " images but ",
                                            labels_path, " holds ", labels.dims[0], " labels"));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      return absl::InvalidArgumentError(absl::StrCat(labels_path, ": label of example ", i, " is ",
                                                     static_cast<int>(labels.data[i]),
                                                     ", expected 0..", kNumClasses - 1));
    }
  }

  Dataset data;
  data.num_examples = images.dims[0];
  data.dim = images.dims[1] * images.dims[2];
  data.features.resize(images.data.size());
  std::transform(images.data.begin(), images.data.end(), data.features.begin(),
                 [](uint8_t pixel) { return static_cast<float>(pixel) / 255.0f; });
  data.labels.assign(labels.data.begin(), labels.data.end());
  return data;
}

absl::StatusOr<int> CountFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string base = dir.empty() ? std::string(".") : dir;
  PST_ASSIGN_OR_RETURN(const std::string path,
                       ResolvePath(absl::StrCat(base, "/", prefix, "-labels-idx1-ubyte")));
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  GzCloser closer(file);
  std::vector<uint8_t> header;
  PST_RETURN_IF_ERROR(ReadExactly(file, path, 8, "header", &header));
  const uint32_t found_magic = BigEndian32(header.data());
  if (found_magic != kLabelsMagic) {
    return absl::DataLossError(absl::StrFormat("%s: bad magic number 0x%08x, expected 0x%08x", path,
                                               found_magic, kLabelsMagic));
  }
  const uint32_t count = BigEndian32(header.data() + 4);
  if (count > static_cast<uint32_t>(INT_MAX)) {
    return absl::DataLossError(absl::StrCat(path, ": implausible example count ", count));
  }
  return static_cast<int>(count);
}

Dataset ShardDataset(const Dataset& data, int index, int count) {
  Dataset shard;
  shard.dim = data.dim;
  if (count <= 0 || index < 0 || index >= count || data.dim < 0) return shard;
  const size_t dim = static_cast<size_t>(data.dim);
  // Never read past what the vectors actually hold.
  size_t n = static_cast<size_t>(std::max(data.num_examples, 0));
  n = std::min(n, data.labels.size());
  if (dim > 0) n = std::min(n, data.features.size() / dim);
  const size_t step = static_cast<size_t>(count);
  const size_t shard_size = n > static_cast<size_t>(index) ? (n - index + step - 1) / step : 0;
  shard.features.reserve(shard_size * dim);
  shard.labels.reserve(shard_size);
  for (size_t i = static_cast<size_t>(index); i < n; i += step) {
    shard.features.insert(shard.features.end(), data.features.begin() + i * dim,
                          data.features.begin() + (i + 1) * dim);
    shard.labels.push_back(data.labels[i]);
  }
  shard.num_examples = static_cast<int>(shard.labels.size());
  return shard;
}

}  // namespace pst::data
