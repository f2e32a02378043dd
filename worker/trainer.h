// The worker's training loop: register with the coordinator, load this
// worker's shard of the data, then repeat pull -> compute gradients -> push
// until the epochs are done or the coordinator says stop. Heartbeats carry
// progress to the coordinator from a background thread.
#ifndef PST_WORKER_TRAINER_H_
#define PST_WORKER_TRAINER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process.h"

namespace pst::worker {

struct TrainerOptions {
  int worker_index = 0;
  uint64_t incarnation = 0;
  std::string coordinator_address;
  std::string data_dir;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration peer_timeout = absl::Seconds(60);
  absl::Duration startup_timeout = absl::Seconds(120);
  absl::Duration rpc_timeout = absl::Seconds(60);
  absl::Duration step_delay = absl::ZeroDuration();  // an artificially slow worker
};

// Runs one worker to the end of the job. Returns OK when the worker finished
// its epochs or was told to stop; an error when the coordinator or a ps
// could not be reached in time, the data could not be read, or the plan
// does not match the model. When `stop` is stopped (SIGTERM), the loop ends
// after the current step and the worker reports itself gone.
absl::Status RunWorker(const TrainerOptions& options, const common::StopSignal& stop);

}  // namespace pst::worker

#endif  // PST_WORKER_TRAINER_H_
