#include "data/example_stream.h"

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/line_source.h"

namespace pst::data {
namespace {

// The record's 1-based line number in its file.
int64_t LineNumberOf(const RecordStream& records, const Record& record) {
  return LineSource::FileLineNumber(records.share().pieces[static_cast<size_t>(record.piece)],
                                    record.offset, record.line);
}

// Parses `record` with `parse(path, line_number, dataset)`: with the line
// number known at once for a range from the file's start, and found (by
// counting the file's earlier lines) only for an error otherwise.
template <typename Dataset, typename Parse>
absl::Status ParseRecord(const RecordStream& records, const Record& record, Parse parse,
                         Dataset* batch) {
  const FilePiece& piece = records.share().pieces[static_cast<size_t>(record.piece)];
  const bool known = piece.begin == 0;
  absl::Status parsed = parse(piece.path, known ? record.line + 1 : 0, batch);
  if (parsed.ok() || known) return parsed;
  Dataset scratch;
  if constexpr (requires { scratch.offsets; }) scratch.offsets.push_back(0);
  return parse(piece.path, LineNumberOf(records, record), &scratch);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CtrExampleStream>> CtrExampleStream::Open(
    InputShare share, const StreamOptions& options, const CtrFeatureConfig& features,
    const Position& at) {
  const int64_t buckets = features.buckets_per_field;
  if (buckets < 0 || buckets > std::numeric_limits<int64_t>::max() / kCriteoFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("buckets_per_field must be 0 (hash ids) or in [1, ",
                     std::numeric_limits<int64_t>::max() / kCriteoFields, "], got ", buckets));
  }
  PST_ASSIGN_OR_RETURN(std::unique_ptr<RecordStream> records,
                       RecordStream::Open(std::move(share), options, at));
  return std::unique_ptr<CtrExampleStream>(new CtrExampleStream(std::move(records), features));
}

absl::StatusOr<int64_t> CtrExampleStream::NextBatch(int64_t max_examples, CtrDataset* batch) {
  const int64_t size = batch->size;
  const size_t dense = batch->dense.size();
  const size_t ids = batch->ids.size();
  const size_t labels = batch->labels.size();
  auto undo = [&] {
    batch->size = size;
    batch->dense.resize(dense);
    batch->ids.resize(ids);
    batch->labels.resize(labels);
  };
  int64_t added = 0;
  while (added < max_examples) {
    absl::StatusOr<bool> got = records_->Next(&record_);
    if (!got.ok()) {
      undo();
      return got.status();
    }
    if (!*got) break;
    const absl::Status parsed = ParseRecord(
        *records_, record_,
        [this](const std::string& path, int64_t line_number, CtrDataset* out) {
          return ParseCriteoLine(record_.text, path, line_number, features_, out);
        },
        batch);
    if (!parsed.ok()) {
      undo();
      return parsed;
    }
    ++added;
  }
  return added;
}

absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> LibsvmExampleStream::Open(
    InputShare share, const StreamOptions& options, const LibsvmFeatureConfig& features,
    const Position& at) {
  if (features.buckets < 0) {
    return absl::InvalidArgumentError(absl::StrCat("buckets must be >= 0, got ", features.buckets));
  }
  PST_ASSIGN_OR_RETURN(std::unique_ptr<RecordStream> records,
                       RecordStream::Open(std::move(share), options, at));
  return std::unique_ptr<LibsvmExampleStream>(
      new LibsvmExampleStream(std::move(records), features));
}

absl::StatusOr<int64_t> LibsvmExampleStream::NextBatch(int64_t max_examples, LibsvmDataset* batch) {
  if (batch->offsets.empty()) batch->offsets.push_back(0);
  const int64_t size = batch->size;
  const size_t offsets = batch->offsets.size();
  const size_t ids = batch->ids.size();
  const size_t labels = batch->labels.size();
  auto undo = [&] {
    batch->size = size;
    batch->offsets.resize(offsets);
    batch->ids.resize(ids);
    batch->values.resize(ids);
    batch->labels.resize(labels);
  };
  const int64_t start_epoch = records_->position().epoch;
  while (batch->size - size < max_examples) {
    // A whole epoch of blank and comment lines: the input holds no example,
    // and reading on forever would never fill the batch.
    if (batch->size == size && records_->position().epoch > start_epoch + 1) break;
    absl::StatusOr<bool> got = records_->Next(&record_);
    if (!got.ok()) {
      undo();
      return got.status();
    }
    if (!*got) break;
    const absl::Status parsed = ParseRecord(
        *records_, record_,
        [this](const std::string& path, int64_t line_number, LibsvmDataset* out) {
          return ParseLibsvmLine(record_.text, path, line_number, features_.buckets, out);
        },
        batch);
    if (!parsed.ok()) {
      undo();
      return parsed;
    }
  }
  return batch->size - size;
}

}  // namespace pst::data
