#include "data/record_stream.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "data/reader_util.h"

namespace pst::data {

using data_internal::Mix64;

std::string Position::ToString() const {
  return absl::StrCat(epoch, ":", piece, ":", offset, ":", line, ":", emitted, ":", reader);
}

absl::StatusOr<Position> Position::Parse(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  Position p;
  int64_t* fields[] = {&p.epoch, &p.piece, &p.offset, &p.line, &p.emitted};
  bool ok = parts.size() == 6;
  for (size_t i = 0; ok && i < 5; ++i) ok = absl::SimpleAtoi(parts[i], fields[i]);
  ok = ok && absl::SimpleAtoi(parts[5], &p.reader);
  if (!ok || p.epoch < 0 || p.piece < 0 || p.offset < -1 || p.line < 0 || p.emitted < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a reader position (epoch:piece:offset:line:emitted:reader): ",
                     data_internal::Shown(text)));
  }
  return p;
}

RecordStream::RecordStream(InputShare share, const StreamOptions& options)
    : share_(std::move(share)),
      options_(options),
      fingerprint_(Fingerprint(share_, options)),
      buffer_(options.buffer_size) {}

uint64_t RecordStream::Fingerprint(const InputShare& share, const StreamOptions& options) {
  uint64_t h = Mix64(0xf1a9e5ull ^ share.pieces.size());
  auto mix = [&h](uint64_t v) { h = Mix64(h ^ v) + 0x9e3779b97f4a7c15ull; };
  for (const FilePiece& piece : share.pieces) {
    for (const char c : piece.path) mix(static_cast<unsigned char>(c));
    mix(piece.gzip ? 1 : 0);
    mix(static_cast<uint64_t>(piece.begin));
    mix(static_cast<uint64_t>(piece.end));
    mix(static_cast<uint64_t>(piece.stride));
    mix(static_cast<uint64_t>(piece.phase));
  }
  mix(static_cast<uint64_t>(options.buffer_size));
  mix(options.shuffle ? 1 : 0);
  mix(options.shuffle ? options.seed : 0);
  return h != 0 ? h : 1;
}

absl::StatusOr<std::unique_ptr<RecordStream>> RecordStream::Open(InputShare share,
                                                                 const StreamOptions& options,
                                                                 const Position& at) {
  if (options.buffer_size < 1 || options.num_epochs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer_size must be >= 1 and num_epochs >= 0, got ", options.buffer_size,
                     " and ", options.num_epochs));
  }
  if (at.epoch < 0 || at.piece < 0 || at.offset < -1 || at.line < 0 || at.emitted < 0 ||
      (at.piece > 0 && at.piece >= static_cast<int64_t>(share.pieces.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("reader position ", at.ToString(),
                                                   " does not fit a share of ", share.pieces.size(),
                                                   " file pieces"));
  }
  std::unique_ptr<RecordStream> stream(new RecordStream(std::move(share), options));
  if (at.reader != 0 && at.reader != stream->fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reader position ", at.ToString(),
        " was saved by a reader of other input files, worker share, buffer size or seed"));
  }
  stream->epoch_ = at.epoch;
  if (stream->share_.pieces.empty() || (options.num_epochs > 0 && at.epoch >= options.num_epochs)) {
    stream->done_ = true;
    return stream;
  }
  PST_RETURN_IF_ERROR(stream->OpenPiece(at.piece, at.offset, at.line));
  stream->epoch_from_start_ = at.piece == 0 && at.offset < 0 && at.emitted == 0;
  PST_RETURN_IF_ERROR(stream->Refill());
  if (at.emitted > 0 &&
      (stream->done_ || stream->epoch_ != at.epoch || at.emitted > stream->buffer_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("reader position ", at.ToString(),
                     " is past the end of its block (another input, buffer size or share?)"));
  }
  Record skipped;
  for (int64_t i = 0; i < at.emitted; ++i) stream->buffer_.Take(&skipped);
  return stream;
}

absl::Status RecordStream::OpenPiece(int64_t piece, int64_t offset, int64_t line) {
  source_.reset();
  PST_ASSIGN_OR_RETURN(source_,
                       LineSource::Open(share_.pieces[static_cast<size_t>(piece)], offset, line));
  piece_ = piece;
  return absl::OkStatus();
}

uint64_t RecordStream::BlockSeed() const {
  uint64_t h = Mix64(options_.seed ^ 0x5e1ec7edull);
  h = Mix64(h ^ static_cast<uint64_t>(epoch_));
  h = Mix64(h ^ static_cast<uint64_t>(block_piece_));
  return Mix64(h ^ static_cast<uint64_t>(block_offset_));
}

absl::Status RecordStream::Refill() {
  buffer_.Clear();
  const int64_t num_pieces = static_cast<int64_t>(share_.pieces.size());
  while (true) {
    block_piece_ = piece_;
    block_offset_ = source_->next_offset();
    block_line_ = source_->next_line();
    while (!buffer_.full()) {
      PST_ASSIGN_OR_RETURN(const bool got, source_->Next(&scratch_));
      if (!got) {
        if (piece_ + 1 >= num_pieces) break;
        PST_RETURN_IF_ERROR(OpenPiece(piece_ + 1, -1, 0));
        continue;
      }
      Record* slot = buffer_.Add();
      slot->text.swap(scratch_);
      slot->piece = piece_;
      slot->offset = source_->line_offset();
      slot->line = source_->line_index();
    }
    if (buffer_.size() > 0) {
      if (options_.shuffle) buffer_.Shuffle(BlockSeed());
      epoch_lines_ += buffer_.size();
      return absl::OkStatus();
    }
    // The epoch is over.
    if (epoch_from_start_ && epoch_lines_ == 0) {
      done_ = true;
      return absl::OkStatus();
    }
    ++epoch_;
    if (options_.num_epochs > 0 && epoch_ >= options_.num_epochs) {
      done_ = true;
      return absl::OkStatus();
    }
    PST_RETURN_IF_ERROR(OpenPiece(0, -1, 0));
    epoch_from_start_ = true;
    epoch_lines_ = 0;
  }
}

absl::StatusOr<bool> RecordStream::Next(Record* out) {
  if (!status_.ok()) return status_;
  if (done_) return false;
  if (buffer_.drained()) {
    status_ = Refill();
    if (!status_.ok()) return status_;
    if (done_) return false;
  }
  buffer_.Take(out);
  return true;
}

Position RecordStream::position() const {
  Position p;
  p.epoch = epoch_;
  p.reader = fingerprint_;
  if (done_) return p;
  if (!buffer_.drained()) {
    p.piece = block_piece_;
    p.offset = block_offset_;
    p.line = block_line_;
    p.emitted = buffer_.taken();
  } else {
    p.piece = piece_;
    p.offset = source_->next_offset();
    p.line = source_->next_line();
  }
  return p;
}

}  // namespace pst::data
