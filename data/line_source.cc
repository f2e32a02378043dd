#include "data/line_source.h"

#include <stdio.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/reader_util.h"

namespace pst::data {
namespace {

using data_internal::ErrnoText;
using data_internal::FilePtr;

// Bytes of one file from some offset on.
class ByteReader {
 public:
  virtual ~ByteReader() = default;
  // Up to `n` bytes into `buf`; 0 at the end of the file.
  virtual absl::StatusOr<size_t> Read(char* buf, size_t n) = 0;
};

class PlainReader : public ByteReader {
 public:
  PlainReader(std::string path, FilePtr file) : path_(std::move(path)), file_(std::move(file)) {}

  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    errno = 0;
    const size_t got = std::fread(buf, 1, n, file_.get());
    if (got == 0 && std::ferror(file_.get())) {
      const int saved = errno;
      return absl::DataLossError(absl::StrCat("error reading ", path_, ": ", ErrnoText(saved)));
    }
    return got;
  }

 private:
  const std::string path_;
  FilePtr file_;
};

struct GzCloser {
  void operator()(gzFile f) const {
    if (f != nullptr) gzclose(f);
  }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

class GzReader : public ByteReader {
 public:
  GzReader(std::string path, GzPtr file) : path_(std::move(path)), file_(std::move(file)) {}

  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    const int got = gzread(file_.get(), buf, static_cast<unsigned>(n));
    if (got <= 0) {
      // A truncated stream reads to its end and then reports Z_BUF_ERROR.
      int code = Z_OK;
      gzerror(file_.get(), &code);
      if (got < 0 || code != Z_OK || !gzeof(file_.get())) return Error();
    }
    if (!checked_direct_ && got > 0) {
      checked_direct_ = true;
      if (gzdirect(file_.get())) {
        return absl::DataLossError(absl::StrCat(path_, " is named .gz but is not gzip data"));
      }
    }
    return static_cast<size_t>(got);
  }

  absl::Status Error() {
    int code = 0;
    const char* message = gzerror(file_.get(), &code);
    return absl::DataLossError(absl::StrCat("cannot decompress ", path_, ": ",
                                            message != nullptr ? message : "unknown error"));
  }

  // Skips the first `offset` decompressed bytes.
  absl::Status SkipTo(int64_t offset) {
    std::vector<char> scratch(LineSource::kBufferSize);
    while (offset > 0) {
      const size_t want = static_cast<size_t>(std::min<int64_t>(offset, scratch.size()));
      PST_ASSIGN_OR_RETURN(const size_t got, Read(scratch.data(), want));
      if (got == 0) {
        return absl::DataLossError(
            absl::StrCat(path_, " ends before the saved offset (file changed?)"));
      }
      offset -= static_cast<int64_t>(got);
    }
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  GzPtr file_;
  bool checked_direct_ = false;
};

class BufferedLineSource : public LineSource {
 public:
  BufferedLineSource(FilePiece piece, std::unique_ptr<ByteReader> reader, int64_t offset,
                     int64_t line)
      : piece_(std::move(piece)), reader_(std::move(reader)), buffer_(kBufferSize) {
    next_offset_ = offset;
    next_line_ = line;
  }

  // Reads through the next '\n' (or to the end of the file) into *text,
  // without the '\n': true, or false at the end of the file.
  absl::StatusOr<bool> ReadRawLine(std::string* text) {
    text->clear();
    bool any = false;
    while (true) {
      if (pos_ == len_) {
        if (eof_) return any;
        PST_ASSIGN_OR_RETURN(len_, reader_->Read(buffer_.data(), buffer_.size()));
        pos_ = 0;
        if (len_ == 0) {
          eof_ = true;
          return any;
        }
      }
      any = true;
      const char* start = buffer_.data() + pos_;
      const void* nl = std::memchr(start, '\n', len_ - pos_);
      if (nl != nullptr) {
        const size_t n = static_cast<size_t>(static_cast<const char*>(nl) - start);
        text->append(start, n);
        pos_ += n + 1;
        offset_ += static_cast<int64_t>(n) + 1;
        return true;
      }
      text->append(start, len_ - pos_);
      offset_ += static_cast<int64_t>(len_ - pos_);
      pos_ = len_;
    }
  }

  absl::StatusOr<bool> Next(std::string* text) override {
    while (true) {
      if (piece_.end >= 0 && offset_ >= piece_.end) return false;
      const int64_t start = offset_;
      absl::StatusOr<bool> got = ReadRawLine(text);
      if (!got.ok()) {
        return absl::DataLossError(absl::StrCat(got.status().message(), " (at line ",
                                                FileLineNumber(piece_, start, next_line_), ")"));
      }
      if (!*got) return false;
      const int64_t index = next_line_++;
      next_offset_ = offset_;
      if (index % piece_.stride != piece_.phase) continue;
      line_offset_ = start;
      line_index_ = index;
      return true;
    }
  }

  // The file offset of the next byte to read; set it to where the reader
  // was positioned.
  int64_t offset() const { return offset_; }
  void set_offset(int64_t offset) { offset_ = offset; }

  // Makes the next byte the start of the range's first line.
  void MarkRangeStart() {
    next_offset_ = offset_;
    next_line_ = 0;
  }

 private:
  const FilePiece piece_;
  std::unique_ptr<ByteReader> reader_;
  std::vector<char> buffer_;
  size_t pos_ = 0;
  size_t len_ = 0;
  bool eof_ = false;
  int64_t offset_ = 0;  // file offset of buffer_[pos_]
};

}  // namespace

absl::StatusOr<std::unique_ptr<LineSource>> LineSource::Open(const FilePiece& piece, int64_t offset,
                                                             int64_t line) {
  if (piece.stride < 1 || piece.phase < 0 || piece.phase >= piece.stride) {
    return absl::InvalidArgumentError(absl::StrCat("bad line stride ", piece.stride, "/phase ",
                                                   piece.phase, " for ", piece.path));
  }
  const bool at_start = offset < 0;
  const int64_t seek = at_start ? std::max<int64_t>(piece.begin - 1, 0) : offset;
  std::unique_ptr<ByteReader> reader;
  if (piece.gzip) {
    errno = 0;
    GzPtr gz(gzopen(piece.path.c_str(), "rb"));
    if (gz == nullptr) {
      const int saved = errno;
      return absl::ErrnoToStatus(saved != 0 ? saved : ENOMEM,
                                 absl::StrCat("cannot open input ", piece.path));
    }
    gzbuffer(gz.get(), static_cast<unsigned>(kBufferSize));
    auto gz_reader = std::make_unique<GzReader>(piece.path, std::move(gz));
    PST_RETURN_IF_ERROR(gz_reader->SkipTo(seek));
    reader = std::move(gz_reader);
  } else {
    errno = 0;
    FilePtr file(std::fopen(piece.path.c_str(), "rb"));
    if (file == nullptr) {
      const int saved = errno;
      return absl::ErrnoToStatus(saved, absl::StrCat("cannot open input ", piece.path));
    }
    if (seek > 0 && ::fseeko(file.get(), seek, SEEK_SET) != 0) {
      const int saved = errno;
      return absl::DataLossError(
          absl::StrCat("cannot seek in ", piece.path, " to ", seek, ": ", ErrnoText(saved)));
    }
    reader = std::make_unique<PlainReader>(piece.path, std::move(file));
  }
  auto source =
      std::make_unique<BufferedLineSource>(piece, std::move(reader), at_start ? 0 : offset, line);
  source->set_offset(seek);
  if (at_start && piece.begin > 0) {
    // The line that holds byte begin - 1 ends at or after it: it belongs to
    // the range before, unless that byte is its '\n'.
    std::string straddling;
    PST_ASSIGN_OR_RETURN(const bool got, source->ReadRawLine(&straddling));
    (void)got;
  }
  if (at_start) source->MarkRangeStart();
  return source;
}

int64_t LineSource::FileLineNumber(const FilePiece& piece, int64_t offset, int64_t line) {
  if (piece.begin == 0) return line + 1;
  FilePtr file(std::fopen(piece.path.c_str(), "rb"));
  if (file == nullptr) return 0;
  std::vector<char> buffer(kBufferSize);
  int64_t left = offset;
  int64_t lines = 0;
  while (left > 0) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(left, buffer.size()));
    const size_t got = std::fread(buffer.data(), 1, want, file.get());
    if (got == 0) return 0;
    for (size_t i = 0; i < got; ++i) lines += buffer[i] == '\n' ? 1 : 0;
    left -= static_cast<int64_t>(got);
  }
  return lines + 1;
}

}  // namespace pst::data
