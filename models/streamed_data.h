// What the models that read --data (wide_deep, logreg) share to read it as
// a stream (--stream_data) and their held-out set from --eval_data:
// - StreamedData: the ModelData of a streamed input (its share and its
//   examples per epoch, counted once; data/stream_input.h);
// - LoadStreamed: a worker's share of --data, or the held-out set;
// - LoadedOrStreamed: which of the two a model's data is;
// - ForEachStreamBatch: ForEachBatch's batches, read from the stream;
// - ForEachTrainingBatch: the batches of either, for a training loop;
// - ForEachHeldOutChunk: a held-out set, loaded or streamed, in chunks.
#ifndef PST_MODELS_STREAMED_DATA_H_
#define PST_MODELS_STREAMED_DATA_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/stream_input.h"
#include "models/model.h"
#include "models/train_loop.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

struct StreamedData : ModelData {
  data::StreamInput input;
  int64_t size() const override { return input.examples; }
};

// A model's data as its Load made it: `Loaded` (a ModelData holding its
// examples in `data`), or StreamedData; exactly one is set.
template <typename Loaded>
struct LoadedOrStreamedData {
  const Loaded* loaded = nullptr;
  const StreamedData* streamed = nullptr;
};

// Which one `data` is. Errors: DataAs's InvalidArgument naming `model`, for
// data of another model.
template <typename Loaded>
absl::StatusOr<LoadedOrStreamedData<Loaded>> LoadedOrStreamed(const ModelData& data,
                                                             std::string_view model) {
  LoadedOrStreamedData<Loaded> out;
  out.streamed = dynamic_cast<const StreamedData*>(&data);
  if (out.streamed == nullptr) {
    PST_ASSIGN_OR_RETURN(out.loaded, DataAs<Loaded>(data, model));
  }
  return out;
}

// Whether Load streams: the training data with --stream_data, the held-out
// set whenever --eval_data names one.
inline bool LoadsStreamed(const proto::TrainingConfig& training, bool held_out) {
  return held_out ? !training.eval_data().empty() : training.stream_data();
}

// Shard `shard` of `num_shards` of --data, shuffled in blocks of
// --shuffle_buffer with `shuffle_seed`, over training.epochs(); or (held_out)
// all of --eval_data, in order, once. Errors: those of PrepareStreamInput.
inline absl::StatusOr<std::unique_ptr<ModelData>> LoadStreamed(
    const proto::TrainingConfig& training, bool held_out, int shard, int num_shards,
    data::ExampleFormat format, int64_t buckets) {
  data::StreamOptions options;
  if (held_out) {
    options.buffer_size = 4096;
    options.num_epochs = 1;
  } else {
    options.buffer_size = std::max<int64_t>(1, training.shuffle_buffer());
    options.shuffle = options.buffer_size > 1;
    options.num_epochs = std::max(1, training.epochs());
  }
  auto loaded = std::make_unique<StreamedData>();
  PST_ASSIGN_OR_RETURN(loaded->input,
                       data::PrepareStreamInput(held_out ? training.eval_data() : training.data(),
                                                held_out ? 0 : shard, held_out ? 1 : num_shards,
                                                format, buckets, options));
  return loaded;
}

// The stream's shuffle seed is the worker's (models/train_loop.h), set
// where the stream is opened.
inline data::StreamInput Seeded(const data::StreamInput& input, uint64_t shuffle_seed) {
  data::StreamInput seeded = input;
  seeded.options.seed = shuffle_seed;
  return seeded;
}

// As ForEachBatch (models/train_loop.h), from a stream of input.examples
// examples per epoch: calls step(source, examples, count, epoch, position)
// for every batch from data position `start_position` on, the batch being
// source's examples examples[0 .. count). Batch b of an epoch is the
// epoch's examples [b * batch, ...), so positions mean what they mean for
// loaded data. `open_at(epoch, skip)` opens the stream (OpenCtrAt,
// OpenLibsvmAt). Errors: those of the stream and step; DataLoss when an
// epoch holds fewer examples than were counted (the input changed).
template <typename Dataset, typename OpenAt, typename Step>
absl::Status ForEachStreamBatch(const proto::TrainingConfig& training, int64_t num_examples,
                                int64_t start_position, OpenAt open_at, Step&& step) {
  const int64_t batch = training.batch_size();
  const int64_t per_epoch = (num_examples + batch - 1) / batch;
  if (per_epoch == 0) return absl::OkStatus();
  int64_t position = std::max<int64_t>(0, start_position);
  int epoch = static_cast<int>(position / per_epoch);
  if (epoch >= training.epochs()) return absl::OkStatus();
  int64_t b = position - epoch * per_epoch;
  PST_ASSIGN_OR_RETURN(auto stream, open_at(epoch, b * batch));
  Dataset chunk;
  std::vector<int64_t> examples;
  for (; epoch < training.epochs(); ++epoch, b = 0) {
    for (; b < per_epoch; ++b, ++position) {
      const int64_t n = std::min(batch, num_examples - b * batch);
      chunk = Dataset();
      PST_ASSIGN_OR_RETURN(const int64_t got, stream->NextBatch(n, &chunk));
      if (got != n) {
        return absl::DataLossError(absl::StrCat("the input changed while training: epoch ", epoch,
                                                " ended ", n - got, " example(s) short of the ",
                                                num_examples, " counted at the start"));
      }
      examples.resize(static_cast<size_t>(n));
      std::iota(examples.begin(), examples.end(), int64_t{0});
      absl::StatusOr<bool> go_on = step(chunk, examples.data(), n, epoch, position);
      if (!go_on.ok()) return go_on.status();
      if (!*go_on) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// A training loop's batches from data position `start_position` on, as
// step(source, examples, count, epoch, position) takes them: ForEachBatch's
// shuffled passes over the loaded examples, or ForEachStreamBatch's over
// the stream, opened by open_at(input, epoch, skip) (OpenCtrAt,
// OpenLibsvmAt) with the worker's `shuffle_seed`.
template <typename Loaded, typename OpenAt, typename Step>
absl::Status ForEachTrainingBatch(const proto::TrainingConfig& training,
                                  const LoadedOrStreamedData<Loaded>& data, uint64_t shuffle_seed,
                                  int64_t start_position, OpenAt open_at, Step&& step) {
  using Dataset = decltype(data.loaded->data);
  if (data.streamed != nullptr) {
    const data::StreamInput input = Seeded(data.streamed->input, shuffle_seed);
    return ForEachStreamBatch<Dataset>(
        training, input.examples, start_position,
        [&](int64_t epoch, int64_t skip) { return open_at(input, epoch, skip); }, step);
  }
  std::vector<int64_t> order;
  return ForEachBatch(training, data.loaded->data.size, shuffle_seed, start_position, &order,
                      [&](int64_t first, int64_t n, int epoch, int64_t position) {
                        return step(data.loaded->data, &order[first], n, epoch, position);
                      });
}

// Calls chunk_fn(source, examples, count) for every example of a held-out
// set in order, in chunks of up to 4096: the loaded examples (source is
// them, examples index them), or the stream open_at(input, 0, 0) opens
// (source is the chunk read).
template <typename Loaded, typename OpenAt, typename ChunkFn>
absl::Status ForEachHeldOutChunk(const LoadedOrStreamedData<Loaded>& data, OpenAt open_at,
                                 ChunkFn&& chunk_fn) {
  using Dataset = decltype(data.loaded->data);
  constexpr int64_t kChunk = 4096;
  std::vector<int64_t> examples;
  if (data.loaded != nullptr) {
    const Dataset* loaded = &data.loaded->data;
    for (int64_t first = 0; first < loaded->size; first += kChunk) {
      const int64_t n = std::min(kChunk, loaded->size - first);
      examples.resize(static_cast<size_t>(n));
      std::iota(examples.begin(), examples.end(), first);
      PST_RETURN_IF_ERROR(chunk_fn(*loaded, examples.data(), n));
    }
    return absl::OkStatus();
  }
  PST_ASSIGN_OR_RETURN(auto stream, open_at(data.streamed->input, 0, 0));
  Dataset chunk;
  for (;;) {
    chunk = Dataset();
    PST_ASSIGN_OR_RETURN(const int64_t n, stream->NextBatch(kChunk, &chunk));
    if (n == 0) return absl::OkStatus();
    examples.resize(static_cast<size_t>(n));
    std::iota(examples.begin(), examples.end(), int64_t{0});
    PST_RETURN_IF_ERROR(chunk_fn(chunk, examples.data(), n));
  }
}

}  // namespace pst::models

#endif  // PST_MODELS_STREAMED_DATA_H_
