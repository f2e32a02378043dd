// A model's streamed input (--stream_data): one worker's share of an input
// spec (a file, a directory, a glob or a comma list of them, plain or .gz;
// data/input_files.h), the stream's options, and how many examples one
// epoch of that share holds, counted once by reading it through (parsing
// every line, so a bad line fails before training starts, not mid-epoch).
//
// The count is what lets a stream train as a loaded data set does: batch b
// of epoch e is the examples [b * batch, (b + 1) * batch) of the epoch's
// order (the last one partial), so a data position (batches since the
// job's start) names the same examples in every run, and resuming at one
// means opening the stream at its epoch's start and passing over the
// examples before it, unparsed (OpenCtrAt / OpenLibsvmAt). Memory: the stream's
// buffer, whatever the input's size.
//
// Functions only; safe from any thread.
#ifndef PST_DATA_STREAM_INPUT_H_
#define PST_DATA_STREAM_INPUT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/criteo.h"
#include "data/example_stream.h"
#include "data/input_files.h"
#include "data/libsvm.h"
#include "data/record_stream.h"

namespace pst::data {

enum class ExampleFormat { kCriteo, kLibsvm };

struct StreamInput {
  InputShare share;
  StreamOptions options;
  ExampleFormat format = ExampleFormat::kCriteo;
  int64_t ctr_buckets_per_field = 0;  // kCriteo: CtrFeatureConfig::buckets_per_field
  int64_t libsvm_buckets = 0;         // kLibsvm: LibsvmFeatureConfig::buckets
  int64_t examples = 0;               // in one epoch of the share
};

// The share of worker `shard` of `num_shards` of `spec`'s files, read with
// `options`, its examples counted. Errors: those of ListInputFiles,
// InputShareOf and the example streams (InvalidArgument naming file:line
// for a line that does not parse).
absl::StatusOr<StreamInput> PrepareStreamInput(absl::string_view spec, int shard, int num_shards,
                                               ExampleFormat format, int64_t buckets,
                                               const StreamOptions& options);

// The stream of `input` from the start of epoch `epoch`, past its first
// `skip` examples. Errors: InvalidArgument for the wrong format, or a skip
// past the epoch's examples; those of the stream.
absl::StatusOr<std::unique_ptr<CtrExampleStream>> OpenCtrAt(const StreamInput& input, int64_t epoch,
                                                            int64_t skip);
absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> OpenLibsvmAt(const StreamInput& input,
                                                                  int64_t epoch, int64_t skip);

}  // namespace pst::data

#endif  // PST_DATA_STREAM_INPUT_H_
