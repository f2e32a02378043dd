// The worker's training loop: register with the coordinator, load this
// worker's shard of the data, then repeat pull -> compute gradients -> push
// until the epochs are done or the coordinator says stop. Heartbeats carry
// progress to the coordinator from a background thread.
#ifndef PST_WORKER_TRAINER_H_
#define PST_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/ps_control.h"
#include "common/ps_transport.h"
#include "device/device_mapping.h"
#include "rpc/grpc_channel.h"

namespace pst::worker {

struct TrainerOptions {
  int worker_index = 0;
  uint64_t incarnation = 0;
  std::string coordinator_address;
  std::string data_dir;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration startup_timeout = absl::Seconds(120);
  absl::Duration rpc_timeout = absl::Seconds(60);
  // How long the worker waits out a failure (a lost ps or chief) before it
  // gives up.
  absl::Duration recovery_timeout = absl::Seconds(300);
  absl::Duration step_delay = absl::ZeroDuration();  // an artificially slow worker
  // The logical devices the MLP computes on, as PlanDevices made them from
  // --device, --gpus, --gpu_memory, ... Empty: one CPU device.
  std::vector<device::LogicalDeviceSpec> device_specs;
  bool log_device_placement = false;
  // Prometheus (--metrics_port): the step counters go here. Null: none.
  // Must outlive RunWorker.
  common::MetricsExporter* metrics = nullptr;
  // Every channel to the coordinator and the ps (security, the BDP probe).
  rpc::RpcSettings rpc;
};

// Runs one worker to the end of the job. Returns OK when the worker finished
// its epochs or was told to stop; an error when the coordinator or a ps
// could not be reached within recovery_timeout, the data could not be read,
// or the plan does not match the model. When `stop` is stopped (SIGTERM),
// the loop ends after the current step and the worker reports itself gone.
//
// Failures: a step that fails on a ps (unreachable, restarted, restored) is
// not the end. The worker waits: when the coordinator announces a new
// generation (every ps restored from a checkpoint), it goes on from its
// data position in that checkpoint; otherwise it retries from where it was,
// with backoff. Without the coordinator it keeps training, and registers
// again (with its position) when a restarted chief answers.
absl::Status RunWorker(const TrainerOptions& options, const common::StopSignal& stop);

// How a worker reaches the rest of the cluster. None of it is owned.
struct WorkerConnections {
  client::CoordinatorClient* coordinator = nullptr;
  // The ps at `addresses` (as the coordinator lists them): their data plane,
  // each call bounded by `rpc_timeout`, and their control calls.
  std::function<std::shared_ptr<common::PsTransport>(const std::vector<std::string>& addresses,
                                                     absl::Duration rpc_timeout)>
      ps_transport;
  std::function<std::unique_ptr<common::PsControl>(const std::vector<std::string>& addresses)>
      ps_control;
};

// The gRPC connections, over `coordinator` (not owned).
WorkerConnections GrpcConnections(client::CoordinatorClient* coordinator,
                                  const rpc::RpcSettings& settings);

// RunWorker over `connections`: the gRPC ones RunWorker makes from
// options.coordinator_address, or in-process ones in a test. Messages name
// the coordinator by options.coordinator_address.
absl::Status RunWorker(const TrainerOptions& options, const WorkerConnections& connections,
                       const common::StopSignal& stop);

// Asks the coordinator at `coordinator_address` for the worker index of
// `claimant` (Coordinator.ClaimWorkerIndex), retrying while it is not up
// until `timeout` passes or `stop` stops. Errors: DeadlineExceeded naming
// the address; Cancelled when stopped; the coordinator's own refusal
// (ResourceExhausted: every index is taken) as it is.
absl::StatusOr<int> ClaimWorkerIndex(const std::string& coordinator_address,
                                     const rpc::RpcSettings& settings,
                                     const std::string& claimant, absl::Duration timeout,
                                     const common::StopSignal& stop);

}  // namespace pst::worker

#endif  // PST_WORKER_TRAINER_H_
