// worker: trains on its shard of the data, pulling parameters from and
// pushing gradients to the ps. When the cluster lists no chief, worker 0
// also runs the coordinator, as in TensorFlow and TFJob.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "chief/chief.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/transport_security.h"
#include "device/device_mapping.h"
#include "flags/chief_options_from_flags.h"
#include "flags/command_line.h"
#include "flags/daemon_main.h"
#include "flags/device_options_from_flags.h"
#include "worker/trainer.h"

ABSL_FLAG(bool, claim_worker_index, false,
          "Ask the chief for this worker's index instead of reading TF_CONFIG's task.index: for "
          "replicas of one worker service sharing one TF_CONFIG (docker-compose with "
          "PSTRAIN_WORKERS=N: N replicas, --num_workers=N). Each --worker_claimant keeps its "
          "index, so a restarted replica gets its own back. Needs a chief in the cluster.");
ABSL_FLAG(std::string, worker_claimant, "",
          "With --claim_worker_index: the name this replica claims under (default: the "
          "hostname, which is the container's id under Docker and stable across its restarts).");
ABSL_FLAG(int32_t, step_delay_ms, 0,
          "Sleep this long on every training step: an artificially slow worker, for tests and "
          "demos of backup workers and bounded staleness.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain worker. Usage: TF_CONFIG='{...\"task\":{\"type\":\"worker\",\"index\":I}}' worker "
      "[--data_dir=DIR]");
  pst::flags::ParseCommandLineOrExit(argc, argv);
  try {
    pst::common::StopSignal& stop = pst::common::ProcessStopSignal();
    pst::flags::AdjustSetup claim;
    if (absl::GetFlag(FLAGS_claim_worker_index)) {
      claim = [&stop](pst::flags::DaemonSetup* setup) -> absl::Status {
        if (setup->tf.cluster.chief.empty()) {
          return absl::InvalidArgumentError(
              "--claim_worker_index needs a chief in TF_CONFIG's cluster to hand out indices");
        }
        std::string claimant = absl::GetFlag(FLAGS_worker_claimant);
        if (claimant.empty()) {
          char host[256] = {};
          if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
            return absl::InvalidArgumentError(
                "--claim_worker_index: this host has no name; set --worker_claimant");
          }
          claimant = host;
        }
        std::fprintf(stderr, "worker: claiming a worker index from the chief as '%s'\n",
                     claimant.c_str());
        absl::StatusOr<int> index = pst::worker::ClaimWorkerIndex(
            setup->tf.cluster.CoordinatorAddress(), setup->rpc, claimant,
            setup->timing.startup_timeout, stop);
        if (!index.ok()) return index.status();
        setup->tf.task.index = *index;
        return absl::OkStatus();
      };
    }
    absl::StatusOr<pst::flags::DaemonSetup> setup =
        pst::flags::SetUpDaemon("worker", pst::common::TaskType::kWorker, claim);
    if (!setup.ok()) return 2;
    if (absl::GetFlag(FLAGS_claim_worker_index)) {
      spdlog::info("claimed worker index {} of {} from the chief", setup->tf.task.index,
                   setup->tf.cluster.worker.size());
    }

    // The devices, checked before anything starts: a bad flag, or
    // --device=gpu without a GPU, is a usage error.
    absl::StatusOr<std::vector<pst::device::LogicalDeviceSpec>> device_specs =
        pst::device::PlanDevices(pst::flags::DeviceOptionsFromFlags(), pst::device::DiscoverGpus());
    if (!device_specs.ok()) {
      std::fprintf(stderr, "worker: %s\n", std::string(device_specs.status().message()).c_str());
      return 2;
    }

    // Worker 0 of a chief-less cluster is the chief too.
    absl::Status chief_status;
    std::thread chief_thread;
    if (setup->tf.IsCoordinator()) {
      // Under per-role certificates the ps take the chief's calls only
      // from a certificate that names chief 0.
      const pst::common::TransportSecurity& security = setup->rpc.security;
      bool names_chief = false;
      for (const pst::common::TaskIdentity& task : security.cert_tasks) {
        names_chief =
            names_chief || (task.type == pst::common::TaskType::kChief && task.index == 0);
      }
      if (security.cert_roles() && !names_chief) {
        spdlog::error(
            "no chief in the cluster, so this worker acts as chief, but its certificate "
            "(--tls_cert) does not name chief-0.pstrain: the ps would refuse its chief calls. "
            "Give worker 0 a certificate with both worker-0.pstrain and chief-0.pstrain, or run a "
            "chief");
        return 2;
      }
      spdlog::info("no chief in the cluster: this worker also acts as chief");
      const pst::chief::ChiefOptions options = pst::flags::ChiefOptionsFromFlags(*setup);
      chief_thread = std::thread(
          [options, &stop, &chief_status] { chief_status = pst::chief::RunChief(options, stop); });
    }

    pst::worker::TrainerOptions options;
    options.worker_index = setup->tf.task.index;
    options.incarnation = pst::common::NewIncarnation();
    options.coordinator_address = setup->tf.cluster.CoordinatorAddress();
    options.data_dir = absl::GetFlag(FLAGS_data_dir);
    options.heartbeat_interval = setup->timing.heartbeat_interval;
    options.startup_timeout = setup->timing.startup_timeout;
    options.rpc_timeout = setup->timing.rpc_timeout;
    options.recovery_timeout = setup->timing.recovery_timeout;
    options.step_delay = absl::Milliseconds(absl::GetFlag(FLAGS_step_delay_ms));
    options.device_specs = *std::move(device_specs);
    options.log_device_placement = absl::GetFlag(FLAGS_log_device_placement);
    options.metrics = setup->metrics.get();
    options.rpc = setup->rpc;
    absl::Status status = pst::worker::RunWorker(options, stop);
    if (!status.ok()) spdlog::error("worker failed: {}", status.ToString());
    if (chief_thread.joinable()) {
      if (!status.ok()) stop.Stop("this worker failed");
      chief_thread.join();
      if (!chief_status.ok()) spdlog::error("job failed: {}", chief_status.ToString());
      if (status.ok()) status = chief_status;
    }
    return status.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: fatal: %s\n", e.what());
    return 1;
  }
}
