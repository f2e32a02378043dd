#include "data/example_stream.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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

// NextBatch for either dataset: appends the examples `parse` makes of the
// stream's lines until `max_examples` more are in *batch, the stream ends,
// or a whole epoch made none (an input of only blank and comment lines,
// read on forever, would never fill the batch). On error `undo()` puts
// *batch back as it was.
template <typename Dataset, typename Parse, typename Undo>
absl::StatusOr<int64_t> ReadBatch(RecordStream& records, Record& record, int64_t max_examples,
                                  Parse parse, Undo undo, Dataset* batch) {
  const int64_t size = batch->size;
  const int64_t start_epoch = records.position().epoch;
  while (batch->size - size < max_examples) {
    if (batch->size == size && records.position().epoch > start_epoch + 1) break;
    absl::StatusOr<bool> got = records.Next(&record);
    if (!got.ok()) {
      undo();
      return got.status();
    }
    if (!*got) break;
    const absl::Status parsed = ParseRecord(records, record, parse, batch);
    if (!parsed.ok()) {
      undo();
      return parsed;
    }
  }
  return batch->size - size;
}

// SkipExamples for either stream: passes over the stream's lines, unparsed,
// until `count` of them held an example (`has_example`) or the stream ends.
template <typename HasExample>
absl::StatusOr<int64_t> SkipRecords(RecordStream& records, Record& record, int64_t count,
                                    HasExample has_example) {
  int64_t passed = 0;
  while (passed < count) {
    PST_ASSIGN_OR_RETURN(const bool got, records.Next(&record));
    if (!got) break;
    if (has_example(record.text)) ++passed;
  }
  return passed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CtrExampleStream>> CtrExampleStream::Open(
    InputShare share, const StreamOptions& options, const CtrFeatureConfig& features,
    const Position& at) {
  PST_RETURN_IF_ERROR(CheckCtrFeatures(features));
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
  auto parse = [this](const std::string& path, int64_t line_number, CtrDataset* out) {
    return parser_.Parse(record_.text, path, line_number, out);
  };
  return ReadBatch(*records_, record_, max_examples, parse, undo, batch);
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
  auto parse = [this](const std::string& path, int64_t line_number, LibsvmDataset* out) {
    return ParseLibsvmLine(record_.text, path, line_number, features_.buckets, out);
  };
  return ReadBatch(*records_, record_, max_examples, parse, undo, batch);
}

absl::StatusOr<int64_t> CtrExampleStream::SkipExamples(int64_t count) {
  return SkipRecords(*records_, record_, count, [](absl::string_view) { return true; });
}

absl::StatusOr<int64_t> LibsvmExampleStream::SkipExamples(int64_t count) {
  return SkipRecords(*records_, record_, count, LibsvmLineHasExample);
}

}  // namespace pst::data
