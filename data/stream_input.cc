#include "data/stream_input.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::data {
namespace {

constexpr int64_t kChunk = 4096;

// Passes over `count` examples of `stream` without parsing them. Errors:
// those of the stream; InvalidArgument when it ends first.
template <typename Stream>
absl::Status Skip(Stream& stream, int64_t count) {
  PST_ASSIGN_OR_RETURN(const int64_t passed, stream.SkipExamples(count));
  if (passed < count) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stream ended ", count - passed, " example(s) short of ", count));
  }
  return absl::OkStatus();
}

// Counts one epoch's examples of `share`.
template <typename Stream, typename Dataset, typename Features>
absl::StatusOr<int64_t> Count(const InputShare& share, const Features& features) {
  StreamOptions once;
  once.buffer_size = kChunk;
  once.num_epochs = 1;
  PST_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, Stream::Open(share, once, features));
  int64_t examples = 0;
  Dataset scratch;
  for (;;) {
    scratch = Dataset();
    PST_ASSIGN_OR_RETURN(const int64_t got, stream->NextBatch(kChunk, &scratch));
    if (got == 0) return examples;
    examples += got;
  }
}

CtrFeatureConfig CtrFeatures(const StreamInput& input) {
  CtrFeatureConfig features;
  features.buckets_per_field = input.ctr_buckets_per_field;
  return features;
}

LibsvmFeatureConfig LibsvmFeatures(const StreamInput& input) {
  LibsvmFeatureConfig features;
  features.buckets = input.libsvm_buckets;
  return features;
}

absl::Status CheckOpen(const StreamInput& input, ExampleFormat format, int64_t epoch,
                       int64_t skip) {
  if (input.format != format) {
    return absl::InvalidArgumentError("a stream opened as another format than it was prepared");
  }
  if (epoch < 0 || skip < 0 || skip > input.examples) {
    return absl::InvalidArgumentError(
        absl::StrCat("no example ", skip, " in epoch ", epoch, " of a stream of ", input.examples));
  }
  return absl::OkStatus();
}

Position EpochStart(const StreamInput& input, int64_t epoch) {
  Position at;
  at.epoch = epoch;
  at.reader = RecordStream::Fingerprint(input.share, input.options);
  return at;
}

}  // namespace

absl::StatusOr<StreamInput> PrepareStreamInput(absl::string_view spec, int shard, int num_shards,
                                               ExampleFormat format, int64_t buckets,
                                               const StreamOptions& options) {
  StreamInput input;
  PST_ASSIGN_OR_RETURN(const std::vector<std::string> files, ListInputFiles(SplitInputSpec(spec)));
  PST_ASSIGN_OR_RETURN(input.share, InputShareOf(files, shard, num_shards));
  input.options = options;
  input.format = format;
  if (format == ExampleFormat::kCriteo) {
    input.ctr_buckets_per_field = buckets;
    PST_ASSIGN_OR_RETURN(input.examples,
                         (Count<CtrExampleStream, CtrDataset>(input.share, CtrFeatures(input))));
  } else {
    input.libsvm_buckets = buckets;
    PST_ASSIGN_OR_RETURN(input.examples, (Count<LibsvmExampleStream, LibsvmDataset>(
                                             input.share, LibsvmFeatures(input))));
  }
  return input;
}

absl::StatusOr<std::unique_ptr<CtrExampleStream>> OpenCtrAt(const StreamInput& input, int64_t epoch,
                                                            int64_t skip) {
  PST_RETURN_IF_ERROR(CheckOpen(input, ExampleFormat::kCriteo, epoch, skip));
  PST_ASSIGN_OR_RETURN(std::unique_ptr<CtrExampleStream> stream,
                       CtrExampleStream::Open(input.share, input.options, CtrFeatures(input),
                                              EpochStart(input, epoch)));
  PST_RETURN_IF_ERROR((Skip(*stream, skip)));
  return stream;
}

absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> OpenLibsvmAt(const StreamInput& input,
                                                                  int64_t epoch, int64_t skip) {
  PST_RETURN_IF_ERROR(CheckOpen(input, ExampleFormat::kLibsvm, epoch, skip));
  PST_ASSIGN_OR_RETURN(std::unique_ptr<LibsvmExampleStream> stream,
                       LibsvmExampleStream::Open(input.share, input.options, LibsvmFeatures(input),
                                                 EpochStart(input, epoch)));
  PST_RETURN_IF_ERROR((Skip(*stream, skip)));
  return stream;
}

}  // namespace pst::data
