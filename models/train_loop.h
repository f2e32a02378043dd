// What every model's training loop shares, independent of how the ps are
// reached and of who drives it: a worker runs a model's loop against remote
// ps, the single-process reference trainer against in-process ones.
// - LoopControl: how the caller steers the loop and hears about its steps.
// - StepTimes: where the steps spent their time.
// - ForEachBatch: the shuffled passes over the data from a data position.
#ifndef PST_MODELS_TRAIN_LOOP_H_
#define PST_MODELS_TRAIN_LOOP_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "device/device.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

// Where a worker's steps spend their time, summed over steps.
struct StepTimes {
  int64_t steps = 0;
  absl::Duration compute;        // gradients (and gathering the batch)
  absl::Duration communication;  // push+pull calls, start to answer
  absl::Duration waited;         // of that, time the loop stood waiting for an answer
};

struct LoopControl {
  // Polled before every step with the data position of the step about to
  // start; true ends the loop there (not an error). A worker holding at an
  // epoch's end stops its loop this way and starts it again from there.
  std::function<bool(int64_t position)> should_stop = [](int64_t) { return false; };
  // After every step: examples in it, its loss, the epoch (0-based), the
  // version of the dense variables now, and the data position after it.
  std::function<void(int64_t examples, float loss, int epoch, int64_t version, int64_t position)>
      on_step = [](int64_t, float, int, int64_t, int64_t) {};
  // Where to start in the data: batches already trained on since the job
  // began, over all epochs (each epoch's shuffle depends only on the seed
  // and the epoch, so a position names the same batches in every run).
  int64_t start_position = 0;
  // Extra time spent on every step: an artificially slow worker, for tests
  // and demos of backup workers and bounded staleness.
  absl::Duration step_delay = absl::ZeroDuration();
  // The logical devices the model computes on (not owned; each batch is
  // split across them and their gradients summed). Empty: one CPU device.
  std::vector<device::Device*> devices;
  bool log_device_placement = false;
  // Accumulates the step times when set (not owned).
  StepTimes* times = nullptr;
  std::string job_prefix = "/job:worker/replica:0/task:0";  // for the placement log
};

inline bool ReachedMaxSteps(const proto::TrainingConfig& training, int64_t global_step) {
  return training.max_steps() > 0 && global_step >= training.max_steps();
}

// The seed of worker `worker_index`'s shuffles: the job's seed and the
// worker's index, so every worker of a job (C++ or Python) that trains
// shard `worker_index` sees the same batches.
inline uint64_t WorkerShuffleSeed(const proto::TrainingConfig& training, int worker_index) {
  return training.seed() ^ (static_cast<uint64_t>(worker_index) << 32);
}

// The order of epoch `epoch`'s pass over `num_examples` examples: a
// shuffle that depends only on the seed and the epoch.
inline void ShuffledOrder(int64_t num_examples, uint64_t shuffle_seed, int epoch,
                          std::vector<int64_t>* order) {
  order->resize(num_examples);
  std::iota(order->begin(), order->end(), 0);
  std::mt19937_64 rng(shuffle_seed ^ (static_cast<uint64_t>(epoch) * 0x9e3779b97f4a7c15ULL));
  std::shuffle(order->begin(), order->end(), rng);
}

// Calls step(first, count, epoch, position) for every batch of a shuffled
// pass, for each epoch, from data position `start_position` on, until step
// fails or asks to stop (returns false). `position` counts batches from the
// job's start; examples order[first .. first+count) make the batch.
template <typename Step>
absl::Status ForEachBatch(const proto::TrainingConfig& training, int64_t num_examples,
                          uint64_t shuffle_seed, int64_t start_position,
                          std::vector<int64_t>* order, Step&& step) {
  const int64_t batch = training.batch_size();
  const int64_t per_epoch = (num_examples + batch - 1) / batch;
  if (per_epoch == 0) return absl::OkStatus();
  int64_t position = std::max<int64_t>(0, start_position);
  for (int epoch = static_cast<int>(position / per_epoch); epoch < training.epochs(); ++epoch) {
    ShuffledOrder(num_examples, shuffle_seed, epoch, order);
    for (int64_t b = position - epoch * per_epoch; b < per_epoch; ++b, ++position) {
      const int64_t start = b * batch;
      absl::StatusOr<bool> go_on =
          step(start, std::min(batch, num_examples - start), epoch, position);
      if (!go_on.ok()) return go_on.status();
      if (!*go_on) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// Whether a model runs as the reference implementation, straight from host
// memory: on one CPU device (or none given).
bool HostOnly(const std::vector<device::Device*>& devices);

// "CPU:0", for the placement log of a worker given no devices. Only its
// allocator is used, which is thread-safe. Never freed.
device::Device* DefaultCpuDevice();

}  // namespace pst::models

#endif  // PST_MODELS_TRAIN_LOOP_H_
