#include "cmd/pstrain_commands.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_export.h"
#include "common/checkpoint_format.h"
#include "common/process.h"
#include "common/tf_config.h"
#include "data/criteo.h"
#include "data/libsvm.h"
#include "device/device_mapping.h"
#include "flags/command_line.h"
#include "flags/device_options_from_flags.h"
#include "flags/job_flags.h"
#include "flags/start_checks.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "tools/deploy_tools.h"
#include "tools/local_cluster.h"
#include "tools/reference.h"
#include "tools/subprocess.h"

ABSL_FLAG(int32_t, ps, 2, "local, plan, reference: number of ps tasks.");
ABSL_FLAG(int32_t, workers, 2, "local: number of worker tasks.");
ABSL_FLAG(bool, chief, true, "local: run a separate chief (false: worker 0 acts as chief).");
ABSL_FLAG(std::string, host, "127.0.0.1", "local: address every task listens on.");
ABSL_FLAG(double, timeout_s, 0,
          "local: stop the whole job after this many seconds (0: never). health: how long to "
          "wait for an answer (0: 5 s).");
ABSL_FLAG(std::string, chief_hosts, "",
          "tfconfig: the chief's host[:port] (none: worker 0 leads).");
ABSL_FLAG(std::string, ps_hosts, "", "tfconfig: comma-separated ps host[:port] list.");
ABSL_FLAG(std::string, worker_hosts, "", "tfconfig: comma-separated worker host[:port] list.");
ABSL_FLAG(std::string, evaluator_hosts, "", "tfconfig: evaluator host[:port] list.");
ABSL_FLAG(std::string, task_type, "worker", "tfconfig: this task's type.");
ABSL_FLAG(int32_t, task_index, 0, "tfconfig: this task's index among its type.");
ABSL_FLAG(int32_t, port, 2222, "tfconfig: the port of a host given without one.");
ABSL_FLAG(double, wait_s, 0,
          "check: also wait up to this long for every ps and the chief to answer health.");
ABSL_FLAG(double, grace_s, 10, "local: seconds between SIGTERM and SIGKILL when stopping.");
ABSL_FLAG(int32_t, slow_worker, -1,
          "local: make this worker slow (it sleeps --slow_worker_delay_ms every step).");
ABSL_FLAG(int32_t, slow_worker_delay_ms, 0, "local: the slow worker's extra time per step.");
ABSL_FLAG(std::string, ps_link_rate, "",
          "local: run each ps in a network namespace of its own behind a link of this tc rate "
          "each way (1gbit, 500mbit), as on a machine with that NIC, to see a job's speed "
          "behind a slow network (root and iproute2; bench/throughput.sh uses it).");
ABSL_FLAG(bool, restart_failed, false,
          "local: restart a daemon killed by a signal (kill -9, a crash) with the same task, "
          "like Docker Compose's restart: on-failure.");
ABSL_FLAG(std::string, worker_command, "",
          "local: run every worker as this shell command instead of the C++ worker, e.g. "
          "'/usr/bin/python3 examples/torch_cnn_fashion_mnist.py' (a Python worker; it gets "
          "TF_CONFIG, and PYTHONPATH with the build tree's pstrain package). Needs --chief.");
ABSL_FLAG(bool, evaluator, false,
          "local: add an evaluator task (the evaluator binary, for the built-in models): it "
          "evaluates every checkpoint, writes eval/ scalars and keeps the best in "
          "<checkpoint_dir>/best. Needs --checkpoint_dir.");
ABSL_FLAG(std::string, evaluator_command, "",
          "local: add an evaluator task run as this shell command, e.g. '/usr/bin/python3 "
          "examples/torch_cnn_fashion_mnist.py --evaluate' (pstrain.Evaluator.from_env(); it "
          "gets TF_CONFIG, PYTHONPATH and PSTRAIN_CHECKPOINT_DIR, _SUMMARY_DIR, _DATA_DIR, "
          "_BEST_METRIC, _BEST_MODE). Needs --chief and --checkpoint_dir.");
ABSL_FLAG(int32_t, max_restarts, 3, "local: with --restart_failed, restarts allowed per task.");
ABSL_FLAG(std::string, out, "", "generate_criteo, generate_libsvm: the file to write.");
ABSL_FLAG(int64_t, rows, 200000, "generate_criteo, generate_libsvm: rows to write.");
ABSL_FLAG(int64_t, vocab, 10000, "generate_criteo: raw values per categorical field.");
ABSL_FLAG(double, churn, 0,
          "generate_criteo: id churn; each field retires churn * vocab values over the file "
          "for new ones (0: a fixed vocabulary; data/criteo.h SyntheticCriteoConfig.churn).");
ABSL_FLAG(int64_t, features, 1000,
          "generate_libsvm: distinct feature ids (spread over the 64-bit id space).");
ABSL_FLAG(std::string, format, "safetensors", "checkpoint export: the file format (safetensors).");
ABSL_FLAG(bool, include_slots, false,
          "checkpoint export: also export the optimizer slots, as <variable>/<slot>.");

namespace pst::cli {
namespace {

// Job flags the launcher forwards, with their current values, to every daemon.
// clang-format off
constexpr const char* kForwardedFlags[] = {
    "data_dir", "model", "hidden", "epochs", "max_steps", "batch_size", "learning_rate",
    "optimizer", "optimizer_form", "momentum", "nesterov", "beta1", "beta2", "epsilon",
    "initial_accumulator", "l1", "l2", "lr_power", "skip_nonfinite", "weight_decay", "rho",
    "centered", "lr_decay", "clip_value", "lr_schedule", "clip_norm", "table_optimizer",
    "table_learning_rate", "reset_slots", "seed", "log_every_s", "heartbeat_ms", "peer_timeout_s",
    "startup_timeout_s", "rpc_timeout_s", "recovery_timeout_s", "data", "eval_fraction",
    "stream_data", "shuffle_buffer", "eval_data",
    "embedding_dim", "buckets_per_field", "buckets", "admit_after", "table_capacity",
    "table_eviction", "table_store_dir", "table_store_cache_bytes", "placement", "ps_replicas",
    "partitioner",
    "num_shards",
    "min_slice_bytes", "max_partitions", "max_shard_bytes", "dense_piece_bytes", "overlap",
    "wire_dtype", "gradient_compression",
    "routing", "mode", "staleness",
    "replicas_to_aggregate", "summary_dir", "summary_steps", "checkpoint_dir",
    "save_checkpoints_steps", "save_checkpoints_secs", "incremental_save_steps",
    "incremental_save_secs",
    "keep_checkpoints", "checkpoint_every_epochs", "eval_every_epochs", "evaluator_wait_s",
    "best_metric", "best_mode", "device", "gpus", "gpu_memory", "virtual_devices", "cpu_devices",
    "log_device_placement", "tls_cert", "tls_key", "tls_ca", "tls_server_name", "auth_token_file",
    "role_tokens_file",
    "bdp_probe", "grpc_max_concurrent_streams", "grpc_memory_quota_mb", "grpc_max_threads",
    "grpc_max_control_message_mb", "test_save_delay_ms",
};
// clang-format on

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "pstrain %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return 2;
}

// For a model that reads --data: "generate[:...]" written and replaced by
// the file's path.
absl::Status ResolveData(pst::proto::TrainingConfig* training) {
  absl::StatusOr<const pst::models::Model*> model = pst::models::ModelFor(*training);
  if (!model.ok()) return model.status();
  if (!(*model)->reads_data_file()) return absl::OkStatus();
  absl::StatusOr<std::string> data = (*model)->PrepareData(training->data());
  if (!data.ok()) return data.status();
  training->set_data(*data);
  return absl::OkStatus();
}

// The job flags as a TrainingConfig, with --data resolved.
absl::StatusOr<pst::proto::TrainingConfig> JobConfig() {
  absl::StatusOr<pst::proto::TrainingConfig> training = pst::flags::TrainingConfigFromFlags();
  if (!training.ok()) return training.status();
  if (absl::Status s = ResolveData(&*training); !s.ok()) return s;
  return training;
}

}  // namespace

int TfConfigCommand() {
  pst::tools::TfConfigHosts hosts;
  hosts.chief = absl::GetFlag(FLAGS_chief_hosts);
  hosts.ps = absl::GetFlag(FLAGS_ps_hosts);
  hosts.worker = absl::GetFlag(FLAGS_worker_hosts);
  hosts.evaluator = absl::GetFlag(FLAGS_evaluator_hosts);
  hosts.task_type = absl::GetFlag(FLAGS_task_type);
  hosts.task_index = absl::GetFlag(FLAGS_task_index);
  hosts.default_port = absl::GetFlag(FLAGS_port);
  absl::StatusOr<std::string> json = pst::tools::BuildTfConfig(hosts);
  if (!json.ok()) {
    std::fprintf(stderr, "pstrain tfconfig: %s\n", std::string(json.status().message()).c_str());
    return 2;
  }
  std::printf("%s\n", json->c_str());
  return 0;
}

int HealthCommand(const std::string& address, const pst::rpc::RpcSettings& rpc) {
  // A malformed address (no port: "localhost") is refused at once, not
  // after waiting for an answer from nowhere.
  std::string host;
  int port = 0;
  if (absl::Status s = pst::common::ParseHostPort(address, &host, &port); !s.ok()) {
    std::fprintf(stderr, "pstrain health: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const double seconds = absl::GetFlag(FLAGS_timeout_s);
  absl::StatusOr<std::string> health = pst::tools::CheckHealth(
      address, rpc, seconds > 0 ? absl::Seconds(seconds) : absl::Seconds(5));
  if (!health.ok()) {
    std::fprintf(stderr, "pstrain health: %s\n", std::string(health.status().message()).c_str());
    return 1;
  }
  std::printf("%s %s\n", address.c_str(), health->c_str());
  return *health == "SERVING" ? 0 : 1;
}

int CheckCommand(const pst::rpc::RpcSettings& rpc) {
  absl::StatusOr<pst::common::TfConfig> config =
      pst::common::LoadTfConfig(absl::GetFlag(FLAGS_tf_config), std::nullopt);
  if (!config.ok()) {
    std::fprintf(stderr, "pstrain check: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  const pst::tools::Preflight result =
      pst::tools::CheckTask(*config, rpc, absl::Seconds(absl::GetFlag(FLAGS_wait_s)));
  std::printf("TF_CONFIG is valid: this is %s at %s\n",
              pst::common::TaskIdString(config->task).c_str(), config->SelfAddress().c_str());
  for (const std::string& note : result.notes) std::printf("ok: %s\n", note.c_str());
  for (const std::string& problem : result.problems) {
    std::printf("PROBLEM: %s\n", problem.c_str());
  }
  return result.problems.empty() ? 0 : 1;
}

int Local() {
  absl::StatusOr<pst::proto::TrainingConfig> training = pst::flags::TrainingConfigFromFlags();
  if (!training.ok()) return Fail("local", training.status());
  if (absl::GetFlag(FLAGS_worker_command).empty() &&
      (*pst::models::ModelFor(*training))->computed_by_workers()) {
    return Fail("local", absl::FailedPreconditionError(absl::StrCat(
                             "--model=", training->model(),
                             " cannot be computed by pstrain's C++ workers: give the workers "
                             "that compute it with --worker_command")));
  }
  if (absl::GetFlag(FLAGS_evaluator) && absl::GetFlag(FLAGS_evaluator_command).empty() &&
      (*pst::models::ModelFor(*training))->computed_by_workers()) {
    return Fail("local", absl::FailedPreconditionError(absl::StrCat(
                             "--evaluator: the evaluator binary cannot compute --model=",
                             training->model(), "; give your Python evaluation with "
                             "--evaluator_command (pstrain.Evaluator)")));
  }
  absl::StatusOr<pst::common::Timing> timing = pst::flags::TimingFromFlags();
  if (!timing.ok()) return Fail("local", timing.status());
  pst::tools::LocalClusterOptions options;
  options.num_ps = absl::GetFlag(FLAGS_ps);
  options.num_workers = absl::GetFlag(FLAGS_workers);
  options.with_chief = absl::GetFlag(FLAGS_chief);
  options.host = absl::GetFlag(FLAGS_host);
  options.bin_dir = pst::tools::ExecutableDir();
  options.summary_json = absl::GetFlag(FLAGS_summary_json);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.grace = absl::Seconds(absl::GetFlag(FLAGS_grace_s));
  options.slow_worker = absl::GetFlag(FLAGS_slow_worker);
  options.slow_worker_delay_ms = absl::GetFlag(FLAGS_slow_worker_delay_ms);
  options.ps_link_rate = absl::GetFlag(FLAGS_ps_link_rate);
  options.restart_failed = absl::GetFlag(FLAGS_restart_failed);
  options.worker_command = absl::GetFlag(FLAGS_worker_command);
  options.with_evaluator = absl::GetFlag(FLAGS_evaluator);
  options.evaluator_command = absl::GetFlag(FLAGS_evaluator_command);
  options.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  options.progress = absl::GetFlag(FLAGS_progress);
  if (absl::Status s = pst::tools::CheckLocalClusterOptions(options); !s.ok()) {
    return Fail("local", s);
  }
  // What every daemon would refuse at start-up, refused here before any
  // starts (or any data set is generated).
  pst::flags::StartCheck check;
  check.tf = pst::tools::LocalClusterShape(options);
  check.training = *training;
  check.timing = *timing;
  check.whole_job = true;
  check.cpp_workers = options.worker_command.empty();
  if (absl::Status s = pst::flags::CheckBeforeStart(check); !s.ok()) return Fail("local", s);
  if (absl::Status s = ResolveData(&*training); !s.ok()) return Fail("local", s);
  for (const char* name : kForwardedFlags) {
    if (std::string(name) == "data") continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr) {
      options.daemon_flags.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
    }
  }
  options.daemon_flags.push_back(absl::StrCat("--data=", training->data()));
  // A live line should move every second; a --log_every_s set to anything
  // but its default still wins. (This Abseil keeps "given on the command
  // line" private.)
  const absl::CommandLineFlag* log_every = absl::FindCommandLineFlag("log_every_s");
  if (log_every != nullptr && log_every->CurrentValue() == log_every->DefaultValue()) {
    options.live_log_every_s = 1;
  }
  pst::common::StopSignal& stop = pst::common::ProcessStopSignal();
  pst::common::StopOnTerminationSignals("interrupted by signal");
  return pst::tools::RunLocalCluster(options, &stop);
}

int Plan() {
  absl::StatusOr<pst::proto::TrainingConfig> training = pst::flags::TrainingConfigFromFlags();
  if (!training.ok()) return Fail("plan", training.status());
  int num_ps = absl::GetFlag(FLAGS_ps);
  const std::string tf_flag = absl::GetFlag(FLAGS_tf_config);
  if (!tf_flag.empty() || std::getenv("TF_CONFIG") != nullptr) {
    absl::StatusOr<pst::common::TfConfig> tf = pst::common::LoadTfConfig(tf_flag, std::nullopt);
    if (!tf.ok()) return Fail("plan", tf.status());
    num_ps = static_cast<int>(tf->cluster.ps.size());
  }
  absl::StatusOr<pst::proto::PlacementPlan> plan = pst::models::BuildPlan(*training, num_ps);
  if (!plan.ok()) return Fail("plan", plan.status());
  std::printf("%s", pst::tools::FormatPlan(*plan).c_str());
  return 0;
}

int Reference() {
  // The process the cluster's daemons are measured against is tuned as they are.
  pst::common::TuneForServing();
  absl::StatusOr<pst::proto::TrainingConfig> training = JobConfig();
  if (!training.ok()) return Fail("reference", training.status());
  absl::StatusOr<nlohmann::json> result =
      pst::tools::TrainReference(*training, absl::GetFlag(FLAGS_ps), absl::GetFlag(FLAGS_data_dir));
  if (!result.ok()) return Fail("reference", result.status());
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    std::ofstream out(path);
    out << result->dump(2) << "\n";
    if (!out) return Fail("reference", absl::InternalError("cannot write " + path));
  }
  std::printf("%s\n", result->dump(2).c_str());
  return 0;
}

int GenerateCriteo() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("generate_criteo", absl::InvalidArgumentError("--out is required"));
  pst::data::SyntheticCriteoConfig config;
  config.rows = absl::GetFlag(FLAGS_rows);
  config.vocab_per_field = absl::GetFlag(FLAGS_vocab);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.churn = absl::GetFlag(FLAGS_churn);
  if (config.rows < 1 || config.vocab_per_field < 1) {
    return Fail("generate_criteo", absl::InvalidArgumentError("--rows and --vocab must be >= 1"));
  }
  absl::StatusOr<pst::data::SyntheticCriteoStats> stats =
      pst::data::WriteSyntheticCriteo(out, config);
  if (!stats.ok()) return Fail("generate_criteo", stats.status());
  nlohmann::json j = {{"path", out},
                      {"rows", stats->rows},
                      {"positive_rate", stats->positive_rate},
                      {"best_auc", stats->best_auc}};
  if (config.churn > 0) j["distinct_values"] = stats->distinct_values;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int GenerateLibsvm() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("generate_libsvm", absl::InvalidArgumentError("--out is required"));
  pst::data::SyntheticLibsvmConfig config;
  config.rows = absl::GetFlag(FLAGS_rows);
  config.features = absl::GetFlag(FLAGS_features);
  config.seed = absl::GetFlag(FLAGS_seed);
  if (config.rows < 1 || config.features < 1) {
    return Fail("generate_libsvm",
                absl::InvalidArgumentError("--rows and --features must be >= 1"));
  }
  absl::StatusOr<pst::data::SyntheticLibsvmStats> stats =
      pst::data::WriteSyntheticLibsvm(out, config);
  if (!stats.ok()) return Fail("generate_libsvm", stats.status());
  nlohmann::json j = {{"path", out},
                      {"rows", stats->rows},
                      {"positive_rate", stats->positive_rate},
                      {"best_auc", stats->best_auc},
                      {"best_auc_held_out", stats->best_auc_tail}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int InspectCheckpoints(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::fprintf(stderr, "pstrain checkpoint inspect: %s does not exist\n", dir.c_str());
    return 1;
  }
  std::vector<std::string> dirs;
  if (std::filesystem::exists(std::filesystem::path(dir) / pst::common::kManifestFile)) {
    dirs.push_back(dir);
  } else {
    dirs = pst::common::ListCheckpoints(dir);
    if (dirs.empty()) {
      std::fprintf(stderr, "pstrain checkpoint inspect: no checkpoint in %s\n", dir.c_str());
      return 1;
    }
  }
  int bad = 0;
  for (const std::string& d : dirs) {
    absl::StatusOr<pst::common::CheckpointReport> report = pst::common::InspectCheckpoint(d);
    if (!report.ok()) {
      ++bad;
      std::printf("%s: CORRUPT: %s\n", d.c_str(), std::string(report.status().message()).c_str());
      continue;
    }
    std::printf("%s: step %lld, %d shard(s), %lld bytes, checksums OK\n", d.c_str(),
                static_cast<long long>(report->global_step), report->num_ps,
                static_cast<long long>(report->total_bytes));
    if (report->inexact) {
      std::printf(
          "  not an exact cut: each worker at its lowest position on any ps (a restore trains "
          "again what some ps hold already)\n");
    }
    if (report->chain.size() > 1) {
      // An incremental checkpoint: what changed since the link before.
      std::printf(
          "  incremental on %s: a chain of %zu links from %s, %lld bytes in all, every "
          "link checked; below, what changed since %s\n",
          report->chain[report->chain.size() - 2].c_str(), report->chain.size(),
          report->chain.front().c_str(), static_cast<long long>(report->chain_bytes),
          report->chain[report->chain.size() - 2].c_str());
    }
    for (const auto& v : report->variables) {
      std::printf("  %-34s %-20s rows %-10lld version %-8lld slots %d  ps %d", v.name.c_str(),
                  v.shape.c_str(), static_cast<long long>(v.rows),
                  static_cast<long long>(v.version), v.slots, v.ps_index);
      if (v.removed > 0) std::printf("  removed %lld", static_cast<long long>(v.removed));
      std::printf("\n");
    }
  }
  return bad == 0 ? 0 : 1;
}

int ExportCheckpoint(const std::string& dir, const std::string& out) {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "safetensors") {
    std::fprintf(stderr,
                 "pstrain checkpoint export: unknown --format=%s (supported: safetensors)\n",
                 format.c_str());
    return 2;
  }
  pst::common::ExportOptions options;
  options.include_slots = absl::GetFlag(FLAGS_include_slots);
  absl::StatusOr<pst::common::ExportResult> result =
      pst::common::ExportSafetensors(dir, out, options);
  if (!result.ok()) {
    std::fprintf(stderr, "pstrain checkpoint export: %s\n",
                 std::string(result.status().message()).c_str());
    return 1;
  }
  for (const std::string& skipped : result->skipped) {
    std::fprintf(stderr, "pstrain checkpoint export: skipped %s\n", skipped.c_str());
  }
  std::printf("%s: %d tensors, %lld bytes, step %lld (from %s)\n", out.c_str(), result->tensors,
              static_cast<long long>(result->bytes), static_cast<long long>(result->global_step),
              result->checkpoint.c_str());
  return 0;
}

// Lists the physical GPUs and the logical devices the device flags give.
// Exit 0 also when no GPU is visible; 2 for a bad flag; 1 for --device=gpu
// without a GPU.
int Devices() {
  const pst::device::DeviceOptions options = pst::flags::DeviceOptionsFromFlags();
  const pst::device::GpuInventory inventory = pst::device::DiscoverGpus();
  std::printf("%s", pst::device::DescribeDevices(inventory, options).c_str());
  if (options.device == "cpu" && !inventory.gpus.empty()) {
    std::printf(
        "(workers compute on the CPU unless --device=gpu or --device=auto; "
        "'pstrain devices --device=auto' shows the GPU view)\n");
  }
  const absl::Status status = pst::device::PlanDevices(options, inventory).status();
  if (status.ok()) return 0;
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

bool NamesEachTasksFiles() {
  for (const char* name : {"tls_cert", "tls_key", "auth_token_file"}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && absl::StrContains(flag->CurrentValue(), "{task}")) return true;
  }
  return false;
}

}  // namespace pst::cli
