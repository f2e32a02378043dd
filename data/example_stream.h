// Batches of parsed examples from a RecordStream (data/record_stream.h):
// CtrExampleStream parses Criteo TSV lines (CriteoLineParser, data/criteo.h)
// into a CtrDataset, LibsvmExampleStream parses libsvm lines
// (ParseLibsvmLine, data/libsvm.h) into a LibsvmDataset: the types
// LoadCtrSplit and LoadLibsvmSplit return, which the models train on.
//
// A line that does not parse is an InvalidArgument error naming the file
// and its line number in the file ("path:line: ..."), as ReadCriteo and
// ReadLibsvm report it. A libsvm blank or comment line is read (it counts in
// positions) but yields no example.
//
// Each stream owns its RecordStream; not thread-safe.
#ifndef PST_DATA_EXAMPLE_STREAM_H_
#define PST_DATA_EXAMPLE_STREAM_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "data/criteo.h"
#include "data/input_files.h"
#include "data/libsvm.h"
#include "data/record_stream.h"

namespace pst::data {

class CtrExampleStream {
 public:
  // Errors: InvalidArgument for a bad buckets_per_field; those of
  // RecordStream::Open.
  static absl::StatusOr<std::unique_ptr<CtrExampleStream>> Open(InputShare share,
                                                                const StreamOptions& options,
                                                                const CtrFeatureConfig& features,
                                                                const Position& at = Position());

  // Appends up to `max_examples` examples to *batch and returns how many:
  // fewer only at the end of the last epoch (0 then). Errors: those of
  // RecordStream::Next, InvalidArgument for a bad line; on error *batch is
  // as it was before the call. REQUIRES: max_examples >= 1.
  absl::StatusOr<int64_t> NextBatch(int64_t max_examples, CtrDataset* batch);
  // Passes over the next `count` examples without parsing them (every line
  // is one; a bad one fails when it is read as an example): a reader
  // resuming inside an epoch. Returns how many were passed: fewer only at
  // the end of the last epoch. Errors: those of RecordStream::Next.
  absl::StatusOr<int64_t> SkipExamples(int64_t count);

  // The position of the next example (see data/record_stream.h).
  Position position() const { return records_->position(); }
  const RecordStream& records() const { return *records_; }

 private:
  CtrExampleStream(std::unique_ptr<RecordStream> records, const CtrFeatureConfig& features)
      : records_(std::move(records)), parser_(features) {}

  std::unique_ptr<RecordStream> records_;
  CriteoLineParser parser_;
  Record record_;
};

class LibsvmExampleStream {
 public:
  // Errors: InvalidArgument for buckets < 0; those of RecordStream::Open.
  static absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> Open(
      InputShare share, const StreamOptions& options, const LibsvmFeatureConfig& features,
      const Position& at = Position());

  // As CtrExampleStream::NextBatch; batch->offsets gains its leading 0 if
  // it has none. Also returns 0 when a whole epoch held no example (only
  // blank and comment lines), even with num_epochs 0.
  absl::StatusOr<int64_t> NextBatch(int64_t max_examples, LibsvmDataset* batch);
  // As CtrExampleStream::SkipExamples: blank and comment lines are passed
  // over and not counted (LibsvmLineHasExample), as NextBatch does.
  absl::StatusOr<int64_t> SkipExamples(int64_t count);

  Position position() const { return records_->position(); }
  const RecordStream& records() const { return *records_; }

 private:
  LibsvmExampleStream(std::unique_ptr<RecordStream> records, const LibsvmFeatureConfig& features)
      : records_(std::move(records)), features_(features) {}

  std::unique_ptr<RecordStream> records_;
  const LibsvmFeatureConfig features_;
  Record record_;
};

}  // namespace pst::data

#endif  // PST_DATA_EXAMPLE_STREAM_H_
