// ps_server: holds this task's share of the model's variables and applies
// the optimizer to every push. Started with a TF_CONFIG whose task type is
// "ps"; exits 0 when the chief says the job is done, or on SIGTERM after
// draining in-flight requests.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_channel.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/tf_config.h"
#include "common/transport_security.h"
#include "flags/command_line.h"
#include "flags/job_flags.h"
#include "prometheus/gauge.h"
#include "ps_server/grpc_ps_service.h"
#include "ps_server/grpc_replica_link.h"
#include "ps_server/variable_store.h"

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

// The store's figures, read at every scrape.
void ExportStoreMetrics(const VariableStore* store, common::MetricsExporter* metrics) {
  prometheus::Registry& r = metrics->registry();
  const prometheus::Labels& labels = metrics->labels();
  auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge& {
    return prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(r).Add({});
  };
  auto counter = [&](const char* name, const char* help) -> prometheus::Counter& {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(r).Add({});
  };
  prometheus::Gauge& variables = gauge("pstrain_ps_variables", "Variables (and pieces) held");
  prometheus::Gauge& elements = gauge("pstrain_ps_elements", "Parameters held (floats)");
  prometheus::Gauge& hash_rows =
      gauge("pstrain_ps_embedding_rows", "Rows held by hash embedding tables");
  prometheus::Gauge& staleness_max =
      gauge("pstrain_ps_staleness_max", "Largest staleness of an applied dense gradient");
  prometheus::Gauge& generation = gauge("pstrain_ps_generation", "Restore generation");
  prometheus::Counter& pushes = counter("pstrain_ps_pushes_applied_total", "Pushes applied");
  prometheus::Counter& gradients =
      counter("pstrain_ps_gradients_applied_total", "Dense gradients applied");
  prometheus::Counter& staleness =
      counter("pstrain_ps_staleness_sum_total",
              "Summed staleness of applied dense gradients (divide by "
              "pstrain_ps_gradients_applied_total for the mean)");
  prometheus::Counter& dropped =
      counter("pstrain_ps_stale_dropped_total", "Pushes dropped as too stale");
  prometheus::Counter& duplicates =
      counter("pstrain_ps_duplicates_ignored_total", "Repeated pushes recognized and ignored");
  prometheus::Counter& nonfinite =
      counter("pstrain_ps_nonfinite_skipped_total", "Gradient rows skipped for NaN or Inf");
  prometheus::Counter& apply =
      counter("pstrain_ps_apply_seconds_total",
              "Time spent applying pushes (optimizer and sync accumulation, waits for a variable's "
              "lock included), summed over threads");
  prometheus::Family<prometheus::Gauge>& table_rows =
      prometheus::BuildGauge()
          .Name("pstrain_ps_table_rows")
          .Help(
              "Rows this ps holds of each embedding table (hash tables and row-partitioned "
              "variables), by table")
          .Labels(labels)
          .Register(r);
  metrics->AddRefresher([=, &variables, &elements, &hash_rows, &staleness_max, &generation, &pushes,
                         &gradients, &staleness, &dropped, &duplicates, &nonfinite, &apply,
                         &table_rows] {
    const VariableStore::Stats s = store->GetStats();
    variables.Set(s.num_variables);
    elements.Set(static_cast<double>(s.num_elements));
    hash_rows.Set(static_cast<double>(s.hash_rows));
    staleness_max.Set(static_cast<double>(s.staleness_max));
    generation.Set(static_cast<double>(s.generation));
    common::RaiseCounterTo(pushes, s.pushes_applied);
    common::RaiseCounterTo(gradients, s.gradients_applied);
    common::RaiseCounterTo(staleness, s.staleness_sum);
    common::RaiseCounterTo(dropped, s.stale_dropped);
    common::RaiseCounterTo(duplicates, s.duplicates_ignored);
    common::RaiseCounterTo(nonfinite, s.nonfinite_skipped);
    common::RaiseCounterTo(apply, s.apply_seconds);
    for (const auto& [table, rows] : s.table_rows) {
      table_rows.Add({{"table", table}}).Set(static_cast<double>(rows));
    }
  });
}

int Run() {
  common::TuneForServing();
  absl::StatusOr<common::TfConfig> tf =
      common::LoadTfConfig(absl::GetFlag(FLAGS_tf_config), common::TaskType::kPs);
  if (!tf.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(tf.status().message()).c_str());
    return 2;
  }
  // The ps's share of the checks on flags alone (flags/start_checks.h).
  if (absl::Status s = common::CheckPsReplicas(absl::GetFlag(FLAGS_ps_replicas),
                                               static_cast<int>(tf->cluster.ps.size()));
      !s.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status security = common::InitTransportFromFlags(); !security.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(security.message()).c_str());
    return 2;
  }
  const std::string task = common::TaskIdString(tf->task);
  common::InitLogging(task);
  const uint64_t incarnation = common::NewIncarnation();

  common::StopSignal& stop = common::ProcessStopSignal();
  common::StopOnTerminationSignals("signal");

  VariableStore::Options store_options;
  store_options.max_ids_per_request = absl::GetFlag(FLAGS_max_ids_per_request);
  if (store_options.max_ids_per_request < 1) {
    std::fprintf(stderr, "ps_server: --max_ids_per_request must be at least 1\n");
    return 2;
  }
  store_options.max_response_bytes = common::kMaxMessageBytes;
  store_options.max_store_bytes = absl::GetFlag(FLAGS_max_variable_bytes);
  if (store_options.max_store_bytes == 0) {
    const int64_t pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    store_options.max_store_bytes = pages > 0 && page > 0 ? pages * page / 2 : int64_t{8} << 30;
  }
  store_options.max_hash_rows = absl::GetFlag(FLAGS_max_table_rows);
  store_options.max_parked_pulls = absl::GetFlag(FLAGS_max_parked_pulls);
  const double max_park_s = absl::GetFlag(FLAGS_max_park_s);
  if (store_options.max_store_bytes < 0 || store_options.max_hash_rows < 1 ||
      store_options.max_parked_pulls < 1 || !(max_park_s > 0)) {
    std::fprintf(stderr,
                 "ps_server: --max_variable_bytes must be >= 0, and --max_table_rows, "
                 "--max_parked_pulls and --max_park_s > 0\n");
    return 2;
  }
  VariableStore store(store_options);  // before the exporter, whose scrapes read it
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> metrics =
      common::StartMetricsFromFlags(task);
  if (!metrics.ok()) {
    spdlog::error("{}", metrics.status().message());
    return 2;
  }
  if (*metrics != nullptr) {
    ExportStoreMetrics(&store, metrics->get());
    (*metrics)->SetRawMethods(GrpcPsService::RawMethodNames());
    spdlog::info("Prometheus metrics on {} at /metrics", (*metrics)->address());
  }
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (!checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir, ec);
    if (ec || !std::filesystem::is_directory(checkpoint_dir)) {
      spdlog::error("--checkpoint_dir={}: cannot create it: {}", checkpoint_dir,
                    ec ? ec.message() : "not a directory");
      return 2;
    }
  }
  const double replica_timeout_s = absl::GetFlag(FLAGS_replica_timeout_s);
  if (!(replica_timeout_s > 0)) {
    spdlog::error("--replica_timeout_s must be > 0");
    return 2;
  }
  const std::vector<std::string> peers = tf->cluster.ps;
  auto link_to = [peers, replica_timeout_s](int index) -> std::unique_ptr<ReplicaLink> {
    if (index < 0 || index >= static_cast<int>(peers.size())) return nullptr;
    return MakeGrpcReplicaLink(
        peers[index], absl::Seconds(replica_timeout_s),
        absl::Seconds(std::max(replica_timeout_s, absl::GetFlag(FLAGS_startup_timeout_s))));
  };
  GrpcPsService service(&store, tf->task.index, task, incarnation, &stop, checkpoint_dir, link_to);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = common::StartServer(
      tf->SelfAddress(), {{&service, proto::ParameterServer::service_full_name()}},
      absl::GetFlag(FLAGS_bind));
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 1;
  }
  spdlog::info(
      "serving on {} (advertised as {}, {}{}), incarnation {:016x}",
      common::ListenAddress(tf->SelfAddress(), absl::GetFlag(FLAGS_bind)), tf->SelfAddress(),
      common::DescribeTransportSecurity(common::GetTransportSecurity()),
      absl::GetFlag(FLAGS_bdp_probe)
          ? std::string()
          : absl::StrCat(", fixed ", common::kDenseWindowBytes >> 20, " MiB HTTP/2 windows"),
      incarnation);

  const double chief_timeout_s = absl::GetFlag(FLAGS_chief_timeout_s);
  int exit_code = 0;
  while (!stop.WaitFor(absl::Seconds(1))) {
    int expired = 0;
    for (const auto& served : service.PrimaryStores()) {
      expired += served->ExpireParked(absl::Seconds(max_park_s));
    }
    if (expired > 0) {
      spdlog::warn("answered {} pull(s) that waited longer than --max_park_s={} s", expired,
                   max_park_s);
    }
    if (chief_timeout_s > 0 &&
        absl::Now() - service.last_chief_contact() > absl::Seconds(chief_timeout_s)) {
      stop.Stop(absl::StrCat("no word from the chief for ", chief_timeout_s,
                             " s (--chief_timeout_s); giving up"));
      exit_code = 1;
    }
  }
  (exit_code == 0 ? spdlog::info("stopping: {}", stop.reason())
                  : spdlog::error("stopping: {}", stop.reason()));
  for (const auto& served : service.PrimaryStores()) {
    served->CancelAllWaiters(absl::UnavailableError("the ps is shutting down"));
  }
  service.StopBackgroundWork();  // a save in progress finishes its file; no new one starts
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  const VariableStore::Stats stats = store.GetStats();
  spdlog::info("exiting: {} variable(s), {} push(es) applied", stats.num_variables,
               stats.pushes_applied);
  return exit_code;
}

}  // namespace
}  // namespace pst::ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pstrain parameter server. Usage: TF_CONFIG='{...\"task\":{\"type\":\"ps\",...}}' ps_server");
  pst::common::ParseCommandLineOrExit(argc, argv);
  try {
    return pst::ps::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_server: fatal: %s\n", e.what());
    return 1;
  }
}
