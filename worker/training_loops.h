// The per-model training loops, independent of how the ps are reached and
// of who drives them: a worker runs them against remote ps, the
// single-process reference trainer against in-process ones.
#ifndef PST_WORKER_TRAINING_LOOPS_H_
#define PST_WORKER_TRAINING_LOOPS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "data/criteo.h"
#include "data/mnist_reader.h"
#include "device/device.h"
#include "proto/pstrain.pb.h"

namespace pst::worker {

// Where a worker's steps spend their time, summed over steps.
struct StepTimes {
  int64_t steps = 0;
  absl::Duration compute;        // gradients (and gathering the batch)
  absl::Duration communication;  // push+pull calls, start to answer
  absl::Duration waited;         // of that, time the loop stood waiting for an answer
};

struct LoopControl {
  // Polled before every step; true ends the loop (not an error).
  std::function<bool()> should_stop = [] { return false; };
  // After every step: examples in it, its loss, the epoch (0-based), the
  // version of the dense variables now, and the data position after it.
  std::function<void(int64_t examples, float loss, int epoch, int64_t version,
                     int64_t position)>
      on_step = [](int64_t, float, int, int64_t, int64_t) {};
  // Where to start in the data: batches already trained on since the job
  // began, over all epochs (each epoch's shuffle depends only on the seed
  // and the epoch, so a position names the same batches in every run).
  int64_t start_position = 0;
  // Extra time spent on every step: an artificially slow worker, for tests
  // and demos of backup workers and bounded staleness.
  absl::Duration step_delay = absl::ZeroDuration();
  // The logical devices the MLP computes on (not owned; each batch is split
  // across them and their gradients summed). Empty: one CPU device.
  std::vector<Device*> devices;
  bool log_device_placement = false;
  // Accumulates the step times when set (not owned).
  StepTimes* times = nullptr;
  std::string job_prefix = "/job:worker/replica:0/task:0";  // for the placement log
};

// Each returns the global step (the dense variables' version) at the end.
// The loop stops after training.epochs() passes over `data`, when
// training.max_steps() > 0 is reached, or when control.should_stop().
// ASYNC and SSP pushes are tagged with the data position, so a batch
// retried after a failure is applied at most once.
absl::StatusOr<int64_t> TrainMlp(const proto::TrainingConfig& training, const Dataset& data,
                                 uint64_t shuffle_seed, PsClient* ps, const LoopControl& control);
absl::StatusOr<int64_t> TrainWideDeep(const proto::TrainingConfig& training, const CtrDataset& data,
                                      uint64_t shuffle_seed, PsClient* ps,
                                      const LoopControl& control);

}  // namespace pst::worker

#endif  // PST_WORKER_TRAINING_LOOPS_H_
