#include "flags/start_checks.h"

#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chief/job.h"
#include "data/input_files.h"
#include "device/device_mapping.h"
#include "flags/chief_options_from_flags.h"
#include "flags/daemon_main.h"
#include "flags/device_options_from_flags.h"
#include "flags/job_flags.h"
#include "models/registry.h"

namespace pst::flags {
namespace {

// How pstrain local makes a synthetic data set; every generated data set
// takes rows= (data/generated.h).
constexpr char kGenerateFix[] = "--data=generate[:rows=N] for a synthetic data set";

bool IsGenerateSpec(const std::string& data) {
  return data == "generate" || absl::StartsWith(data, "generate:");
}

absl::Status CheckData(const proto::TrainingConfig& training, bool whole_job) {
  absl::StatusOr<const models::Model*> model = models::ModelFor(training);
  if (!model.ok() || !(*model)->reads_data_file()) return absl::OkStatus();
  const std::string& data = training.data();
  if (data.empty()) {
    return absl::InvalidArgumentError(
        whole_job ? absl::StrCat("--model=", training.model(),
                                 " needs --data: a file every task can read, or ", kGenerateFix)
                  : absl::StrCat("--model=", training.model(),
                                 " needs --data: a file this task can read (pstrain local also "
                                 "takes ",
                                 kGenerateFix, ")"));
  }
  if (IsGenerateSpec(data)) {
    if (whole_job) return absl::OkStatus();  // pstrain local writes it
    return absl::InvalidArgumentError(
        absl::StrCat("--data=", data,
                     ": only pstrain local generates data sets; give a daemon the file (pstrain "
                     "generate_criteo and pstrain generate_libsvm write one)"));
  }
  // A streamed input: a file, directory, glob or list of them.
  auto check_input = [](const char* flag, const std::string& spec) -> absl::Status {
    absl::Status s = data::ListInputFiles(data::SplitInputSpec(spec)).status();
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", s.message()));
  };
  if (!training.eval_data().empty()) {
    if (absl::Status s = check_input("--eval_data", training.eval_data()); !s.ok()) return s;
  }
  if (training.stream_data()) return check_input("--data", data);
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(data, ec);
  if (!std::filesystem::exists(status)) {
    return absl::InvalidArgumentError(
        whole_job ? absl::StrCat("--data=", data,
                                 ": no such file; give a file every task can "
                                 "read, or ",
                                 kGenerateFix)
                  : absl::StrCat("--data=", data,
                                 ": no such file on this machine (every task that reads the "
                                 "data needs it at this path)"));
  }
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data=", data,
                     " is a directory; --data names one file (--stream_data reads a directory, "
                     "a glob or a list of files)"));
  }
  return absl::OkStatus();
}

absl::Status CheckReplicasToAggregate(const proto::TrainingConfig& training, int num_workers) {
  const int replicas = training.sync().replicas_to_aggregate();
  if (training.sync().mode() != proto::SYNC || replicas <= num_workers) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--replicas_to_aggregate=", replicas, " exceeds the ", num_workers,
                   " worker(s) of the cluster: give at most ", num_workers, " (0: every worker)"));
}

// The saves' cadences: none negative, and incremental saves only where
// there are checkpoints.
absl::Status CheckSaveCadence() {
  const std::pair<const char*, double> cadences[] = {
      {"--save_checkpoints_steps",
       static_cast<double>(absl::GetFlag(FLAGS_save_checkpoints_steps))},
      {"--save_checkpoints_secs", absl::GetFlag(FLAGS_save_checkpoints_secs)},
      {"--incremental_save_steps",
       static_cast<double>(absl::GetFlag(FLAGS_incremental_save_steps))},
      {"--incremental_save_secs", absl::GetFlag(FLAGS_incremental_save_secs)}};
  for (const auto& [flag, value] : cadences) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", value, " is negative: give how often to save, or 0 for never"));
    }
  }
  if ((cadences[2].second > 0 || cadences[3].second > 0) &&
      absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return absl::InvalidArgumentError(
        "--incremental_save_steps/_secs save checkpoints: give --checkpoint_dir too");
  }
  return absl::OkStatus();
}

absl::Status CheckDevices() {
  const device::DeviceOptions options = DeviceOptionsFromFlags();
  // The CPU needs no GPU listing (which loads the driver's libraries).
  const device::GpuInventory inventory = absl::AsciiStrToLower(options.device) == "cpu"
                                             ? device::GpuInventory()
                                             : device::DiscoverGpus();
  absl::Status status = device::PlanDevices(options, inventory).status();
  if (status.ok() || status.code() != absl::StatusCode::kFailedPrecondition) return status;
  return absl::FailedPreconditionError(
      absl::StrCat(status.message(),
                   "; run the workers with --device=cpu, or --device=auto (the GPUs when "
                   "any is visible)"));
}

}  // namespace

absl::Status CheckBeforeStart(const StartCheck& check) {
  const common::ClusterSpec& cluster = check.tf.cluster;
  const common::TaskType type = check.tf.task.type;
  const bool coordinator = check.whole_job || check.tf.IsCoordinator();
  const bool worker = check.cpp_workers && (check.whole_job || type == common::TaskType::kWorker);
  const bool evaluator =
      !cluster.evaluator.empty() && (check.whole_job || type == common::TaskType::kEvaluator);
  const bool ps = check.whole_job || type == common::TaskType::kPs;

  if (coordinator || ps) {
    if (absl::Status s =
            CheckPsReplicas(check.training.ps_replicas(), static_cast<int>(cluster.ps.size()));
        !s.ok()) {
      return s;
    }
  }
  if (coordinator) {
    if (absl::Status s =
            CheckReplicasToAggregate(check.training, static_cast<int>(cluster.worker.size()));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckSaveCadence(); !s.ok()) return s;
  }
  if (coordinator || worker) {
    if (absl::Status s = CheckData(check.training, check.whole_job); !s.ok()) return s;
  }
  if (evaluator && absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return absl::InvalidArgumentError(
        "an evaluator needs --checkpoint_dir: the directory the chief saves the checkpoints it "
        "evaluates in, e.g. --checkpoint_dir=/tmp/pstrain_checkpoints");
  }
  if (coordinator) {
    DaemonSetup setup;
    setup.tf = check.tf;
    setup.training = check.training;
    setup.timing = check.timing;
    if (absl::Status s = chief::CheckEvaluationOptions(ChiefOptionsFromFlags(setup)); !s.ok()) {
      return s;
    }
  }
  if (worker) {
    if (absl::Status s = CheckDevices(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace pst::flags
