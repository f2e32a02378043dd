// ps_server: holds this task's share of the model's variables and applies
// the optimizer to every push. Started with a TF_CONFIG whose task type is
// "ps"; exits 0 when the chief says the job is done, or on SIGTERM after
// draining in-flight requests.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "rpc/grpc_channel.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/tf_config.h"
#include "flags/command_line.h"
#include "flags/job_flags.h"
#include "ps_server/run_ps.h"
#include "ps_server/store/admission_filter.h"
#include "ps_server/store/disk_tier.h"

ABSL_FLAG(int64_t, max_ids_per_request, int64_t{1} << 22,
          "Row ids one PullRows or PushRows may list (over all its tables); a request with "
          "more is refused with INVALID_ARGUMENT.");
ABSL_FLAG(int64_t, max_variable_bytes, 0,
          "Bytes of dense variables and optimizer slots this ps may hold; a CreateVariables past "
          "it is refused with RESOURCE_EXHAUSTED before anything is allocated (0: half of this "
          "machine's memory).");
ABSL_FLAG(int64_t, max_table_rows, int64_t{1} << 26,
          "Rows one hash embedding table (per ps) may hold; a row push that would store more is "
          "refused with RESOURCE_EXHAUSTED. Reads store no row.");
ABSL_FLAG(int64_t, admission_filter_bytes, pst::ps::AdmissionFilter::kDefaultBytes,
          "Hash embeddings with --admit_after > 1: bytes of each table's counting filter of "
          "touches (allocated on its first count). Ids may be admitted early (under 1% of "
          "admissions at the default for 10M ids, docs/tables.md), never late.");
ABSL_FLAG(int64_t, max_parked_pulls, 4096,
          "Pulls that may wait at once for a version (sync) or a clock (SSP); one more is "
          "refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, max_park_s, 600,
          "Longest a pull may wait for a version or clock before it is answered "
          "DEADLINE_EXCEEDED, whatever the client's deadline.");
ABSL_FLAG(double, replica_timeout_s, 10,
          "Replicated jobs (--ps_replicas=2): longest a change forwarded to a shard's backup may "
          "go unanswered before the backup counts as out of sync.");
ABSL_FLAG(double, chief_timeout_s, 300,
          "Exit with an error if the chief has not been heard from for this many seconds "
          "(0: wait forever).");

namespace pst::ps {
namespace {

int Run() {
  common::TuneForServing();
  absl::StatusOr<common::TfConfig> tf =
      common::LoadTfConfig(absl::GetFlag(FLAGS_tf_config), common::TaskType::kPs);
  if (!tf.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(tf.status().message()).c_str());
    return 2;
  }
  // The ps's share of the checks on flags alone (flags/start_checks.h).
  if (absl::Status s = flags::CheckPsReplicas(absl::GetFlag(FLAGS_ps_replicas),
                                              static_cast<int>(tf->cluster.ps.size()));
      !s.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<rpc::RpcSettings> rpc = flags::RpcSettingsFromFlags();
  if (!rpc.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(rpc.status().message()).c_str());
    return 2;
  }
  const std::string task = common::TaskIdString(tf->task);
  common::InitLogging(task);

  common::StopSignal& stop = common::ProcessStopSignal();
  common::StopOnTerminationSignals("signal");

  PsDaemonOptions options;
  options.tf = *tf;
  options.rpc = *std::move(rpc);
  options.incarnation = common::NewIncarnation();
  VariableStore::Options& store = options.store;
  store.max_ids_per_request = absl::GetFlag(FLAGS_max_ids_per_request);
  if (store.max_ids_per_request < 1) {
    std::fprintf(stderr, "ps_server: --max_ids_per_request must be at least 1\n");
    return 2;
  }
  store.max_response_bytes = rpc::kMaxMessageBytes;
  store.max_store_bytes = absl::GetFlag(FLAGS_max_variable_bytes);
  if (store.max_store_bytes == 0) {
    const int64_t pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    store.max_store_bytes = pages > 0 && page > 0 ? pages * page / 2 : int64_t{8} << 30;
  }
  store.max_hash_rows = absl::GetFlag(FLAGS_max_table_rows);
  store.max_parked_pulls = absl::GetFlag(FLAGS_max_parked_pulls);
  store.admission_filter_bytes = absl::GetFlag(FLAGS_admission_filter_bytes);
  if (absl::Status s = pst::ps::AdmissionFilter::Create(store.admission_filter_bytes).status();
      !s.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const double max_park_s = absl::GetFlag(FLAGS_max_park_s);
  if (store.max_store_bytes < 0 || store.max_hash_rows < 1 || store.max_parked_pulls < 1 ||
      !(max_park_s > 0)) {
    std::fprintf(stderr,
                 "ps_server: --max_variable_bytes must be >= 0, and --max_table_rows, "
                 "--max_parked_pulls and --max_park_s > 0\n");
    return 2;
  }
  options.max_park = absl::Seconds(max_park_s);
  if (const std::string dir = absl::GetFlag(FLAGS_table_store_dir); !dir.empty()) {
    DiskTier::Options disk;
    disk.block_cache_bytes = absl::GetFlag(FLAGS_table_store_cache_bytes);
    if (disk.block_cache_bytes < 0) {
      std::fprintf(stderr, "ps_server: --table_store_cache_bytes must be >= 0\n");
      return 2;
    }
    disk.write_buffer_bytes = std::max<int64_t>(disk.block_cache_bytes, int64_t{4} << 20);
    // One directory per ps: several may share a machine and a --table_store_dir.
    absl::StatusOr<std::unique_ptr<DiskTier>> tier =
        DiskTier::Open(absl::StrCat(dir, "/ps-", tf->task.index), disk);
    if (!tier.ok()) {
      std::fprintf(stderr, "ps_server: --table_store_dir: %s\n",
                   std::string(tier.status().message()).c_str());
      return 2;
    }
    store.disk_tier = *std::move(tier);
  }
  const double replica_timeout_s = absl::GetFlag(FLAGS_replica_timeout_s);
  if (!(replica_timeout_s > 0)) {
    spdlog::error("--replica_timeout_s must be > 0");
    return 2;
  }
  options.replica_timeout = absl::Seconds(replica_timeout_s);
  options.replica_connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  options.chief_timeout = absl::Seconds(absl::GetFlag(FLAGS_chief_timeout_s));
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.bind = absl::GetFlag(FLAGS_bind);
  const int32_t save_delay_ms = absl::GetFlag(FLAGS_test_save_delay_ms);
  if (save_delay_ms < 0) {
    std::fprintf(stderr, "ps_server: --test_save_delay_ms must be >= 0\n");
    return 2;
  }
  options.save_delay = absl::Milliseconds(save_delay_ms);
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> metrics =
      flags::StartMetricsFromFlags(task);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 2;
  }
  options.metrics = *std::move(metrics);
  const absl::Status status = RunPs(std::move(options), stop);
  if (status.ok()) return 0;
  // A stop's reason is in the log already ("stopping: ...").
  if (!stop.stopped()) spdlog::error("{}", status.message());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

}  // namespace
}  // namespace pst::ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain parameter server. Usage: TF_CONFIG='{...\"task\":{\"type\":\"ps\",...}}' ps_server");
  pst::flags::ParseCommandLineOrExit(argc, argv);
  try {
    return pst::ps::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_server: fatal: %s\n", e.what());
    return 1;
  }
}
