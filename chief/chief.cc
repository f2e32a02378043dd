#include "chief/chief.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "chief/busy_retry.h"
#include "chief/checkpoint_cut.h"
#include "chief/coordinator.h"
#include "chief/grpc_coordinator_service.h"
#include "client/grpc_ps_control.h"
#include "client/grpc_ps_transport.h"
#include "client/ps_client.h"
#include "common/checkpoint_format.h"
#include "common/safe_file.h"
#include "common/event_writer.h"
#include "common/grpc_channel.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/placement.h"
#include "common/ps_control.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "common/transport_security.h"
#include "data/criteo.h"
#include "data/mnist_reader.h"
#include "models/evaluation.h"
#include "models/mlp.h"
#include "models/model_spec.h"
#include "nlohmann/json.hpp"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::chief {
namespace {

// A ps as the chief knows it: where it is, and the incarnation it was last
// created or restored in.
struct PsPeer {
  std::string address;
  uint64_t incarnation = 0;
  absl::Time last_ok;
};

// Creates this ps's variables, retrying while it is not up yet. Returns how
// many were new (the rest existed already: a ps that kept its state).
absl::StatusOr<int> CreateOnPs(common::PsControl& control, int index, PsPeer* ps,
                               const proto::CreateVariablesRequest& request, absl::Time deadline,
                               const common::StopSignal& stop) {
  absl::Duration backoff = absl::Milliseconds(50);
  for (;; backoff = std::min(2 * backoff, absl::Seconds(1))) {
    absl::StatusOr<proto::CreateVariablesResponse> response =
        control.CreateVariables(index, request, absl::Seconds(2));
    if (response.ok()) return response->created();
    const absl::Status& s = response.status();
    const bool retry = s.code() == absl::StatusCode::kUnavailable ||
                       s.code() == absl::StatusCode::kDeadlineExceeded;
    if (!retry) {
      return absl::Status(s.code(), absl::StrCat("ps at ", ps->address, ": ", s.message()));
    }
    if (stop.WaitFor(backoff)) return absl::CancelledError("stopped while creating variables");
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ps at ", ps->address, " did not come up within --startup_timeout_s: ", s.message()));
    }
  }
}

absl::StatusOr<proto::HealthResponse> ProbePs(common::PsControl& control, int index,
                                              absl::Duration timeout) {
  proto::HealthRequest request;
  request.set_caller("chief");
  return control.Health(index, request, timeout);
}

// Runs `call(i)` for every ps on its own thread and returns the first error.
absl::Status ForEachPs(size_t n, const std::function<absl::Status(size_t)>& call) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { statuses[i] = call(i); });
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) PST_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// Tells every ps, in parallel, to exit; answers are not waited for beyond a
// few seconds, and failures are ignored.
void ShutdownAllPs(common::PsControl& control, const std::string& reason) {
  proto::ShutdownRequest request;
  request.set_reason(reason);
  ForEachPs(control.num_ps(), [&](size_t i) {
    control.Shutdown(static_cast<int>(i), request, absl::Seconds(5)).IgnoreError();
    return absl::OkStatus();
  }).IgnoreError();
}

// Saves a checkpoint of every ps at `step` and commits it with the manifest.
// What one save took.
struct SaveFigures {
  int64_t step = 0;
  int64_t bytes = 0;
  double seconds = 0;           // from the first request to the manifest
  double snapshot_seconds = 0;  // longest snapshot (the copy in memory) on a ps
  double locked_seconds = 0;    // longest time a ps held pushes for its snapshot
  int64_t pushes_during = 0;    // most pushes a ps applied during its save
  int cut_attempts = 0;         // snapshots taken until they formed one cut
  bool exact = false;           // a consistent cut (else lowest positions)
};

// How long a save or restore waits for a ps busy with earlier ones (a
// restarted chief's predecessor may have left one running).
constexpr absl::Duration kBusyBudget = absl::Seconds(30);

// Snapshots tried for one consistent cut before saving an inexact one.
constexpr int kCutAttempts = 30;

absl::StatusOr<SaveFigures> SaveCheckpoint(common::PsControl& control, std::vector<PsPeer>& ps,
                                           const ChiefOptions& options,
                                           const proto::ClusterState& state, int64_t step,
                                           const std::vector<int64_t>& positions) {
  const absl::Time start = absl::Now();
  SaveFigures figures;
  // Phase 1: every ps snapshots (holding pushes for the instant of its
  // copy), again until the snapshots form one cut.
  auto each_ps = [&](proto::SaveRequest::Phase phase, const std::string& name,
                     std::vector<proto::SaveResponse>* answers) {
    return ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
      proto::SaveRequest request;
      request.set_phase(phase);
      request.set_checkpoint(name);
      request.set_num_ps(static_cast<int>(ps.size()));
      request.set_incarnation(ps[i].incarnation);
      return CallWhileBusy(
          [&]() -> absl::Status {
            (*answers)[i].Clear();
            absl::StatusOr<proto::SaveResponse> s =
                control.Save(static_cast<int>(i), request, absl::Minutes(10));
            if (!s.ok()) {
              return absl::Status(s.status().code(), absl::StrCat("saving ps ", i, " at ",
                                                                  ps[i].address, ": ",
                                                                  s.status().message()));
            }
            (*answers)[i] = *std::move(s);
            return absl::OkStatus();
          },
          kBusyBudget);
    });
  };
  const bool sync = state.training().sync().mode() == proto::SYNC;
  std::vector<proto::SaveResponse> snapshots(ps.size());
  std::optional<std::vector<int64_t>> cut_positions;
  absl::Status disagreement;
  for (figures.cut_attempts = 1;; ++figures.cut_attempts) {
    PST_RETURN_IF_ERROR(each_ps(proto::SaveRequest::SNAPSHOT, "", &snapshots));
    absl::StatusOr<std::vector<int64_t>> agreed = CutPositions(snapshots, sync, positions);
    if (agreed.ok()) {
      cut_positions = *std::move(agreed);
      break;
    }
    if (agreed.status().code() != absl::StatusCode::kAborted) return agreed.status();
    disagreement = agreed.status();
    if (figures.cut_attempts >= kCutAttempts) break;
    absl::SleepFor(absl::Milliseconds(1 << std::min(figures.cut_attempts - 1, 6)));
  }
  figures.exact = cut_positions.has_value();
  if (!figures.exact) {
    spdlog::warn(
        "no consistent cut in {} snapshots ({}): saving with each worker at its lowest "
        "position on any ps, so a restore applies some batches again",
        figures.cut_attempts, disagreement.message());
    cut_positions = LowestPositions(snapshots, positions);
  }
  for (const proto::SaveResponse& r : snapshots) {
    figures.snapshot_seconds = std::max(figures.snapshot_seconds, r.snapshot_seconds());
    figures.locked_seconds = std::max(figures.locked_seconds, r.locked_seconds());
  }
  int64_t cut_step = 0;
  for (const proto::SaveResponse& r : snapshots) cut_step = std::max(cut_step, r.max_version());
  if (cut_step > 0) step = cut_step;  // the version the shards hold
  figures.step = step;

  const std::string name = common::CheckpointDirName(step);
  const std::string dir = absl::StrCat(options.checkpoint_dir, "/", name);
  if (common::ReadManifest(dir).ok()) {
    if (common::InspectCheckpoint(dir).ok()) {  // saved already
      std::vector<proto::SaveResponse> ignored(ps.size());
      each_ps(proto::SaveRequest::DISCARD, "", &ignored).IgnoreError();  // frees the copies
      return figures;
    }
    // A checkpoint of this step that fails its checks (the job fell back
    // past it): kept for a look under another name, never deleted.
    const std::string aside = absl::StrCat(dir, ".unusable-", absl::ToUnixMillis(absl::Now()));
    std::error_code ec;
    std::filesystem::rename(dir, aside, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("checkpoint ", dir, " fails its checks and cannot ",
                                              "be moved aside to ", aside, ": ", ec.message()));
    }
    spdlog::warn("checkpoint {} fails its checks; moved it to {} and saving step {} anew", dir,
                 aside, step);
  }
  // Phase 2: every ps writes the snapshot it kept.
  std::vector<proto::SaveResponse> saved(ps.size());
  absl::Status written = each_ps(proto::SaveRequest::WRITE, name, &saved);
  if (!written.ok()) {
    // Not a checkpoint (it has no manifest); remove what was written.
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    return written;
  }
  proto::CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_global_step(step);
  *manifest.mutable_plan() = state.plan();
  *manifest.mutable_training() = state.training();
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  for (int64_t p : *cut_positions) manifest.add_worker_positions(p);
  for (const proto::SaveResponse& r : saved) {
    *manifest.add_shards() = r.shard();
    figures.bytes += r.shard().bytes();
    figures.pushes_during = std::max(figures.pushes_during, r.pushes_during());
  }
  PST_RETURN_IF_ERROR(common::WriteManifest(dir, manifest));
  PST_RETURN_IF_ERROR(common::FsyncDirectory(options.checkpoint_dir));
  // Nothing older is removed until this one passes every check a restore
  // makes.
  if (absl::StatusOr<common::CheckpointReport> checked = common::InspectCheckpoint(dir);
      !checked.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", dir, " was written but fails its checks (",
                                            checked.status().message(),
                                            "); older checkpoints are kept"));
  }
  figures.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  spdlog::info(
      "saved checkpoint {}: {:.1f} MB in {:.2f} s ({:.0f} MB/s); {} cut in {} snapshot(s), "
      "pushes held {:.2f} ms at most",
      dir, figures.bytes / 1e6, figures.seconds,
      figures.seconds > 0 ? figures.bytes / 1e6 / figures.seconds : 0.0,
      figures.exact ? "a consistent" : "NOT an exact", figures.cut_attempts,
      figures.locked_seconds * 1e3);
  PST_RETURN_IF_ERROR(
      common::PruneCheckpoints(options.checkpoint_dir, options.keep_checkpoints, dir));
  return figures;
}

// Restores every ps from the newest checkpoint that passes its checks, into
// restore generation `generation`; an unusable one is reported by name and
// the next older is tried. Returns the manifest of the checkpoint restored,
// or nullopt when there is none.
absl::StatusOr<std::optional<proto::CheckpointManifest>> RestoreLatest(
    common::PsControl& control, std::vector<PsPeer>& ps, const ChiefOptions& options,
    int64_t generation) {
  for (const std::string& dir : common::ListCheckpoints(options.checkpoint_dir)) {
    absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(dir);
    if (!report.ok()) {
      spdlog::warn("checkpoint {} is unusable, trying an older one: {}", dir,
                   report.status().message());
      continue;
    }
    PST_ASSIGN_OR_RETURN(proto::CheckpointManifest manifest, common::ReadManifest(dir));
    const absl::Time start = absl::Now();
    std::vector<proto::RestoreResponse> restored(ps.size());
    PST_RETURN_IF_ERROR(ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
      proto::RestoreRequest request;
      request.set_checkpoint(std::filesystem::path(dir).filename().string());
      *request.mutable_manifest() = manifest;
      request.set_generation(generation);
      return CallWhileBusy(
          [&]() -> absl::Status {
            absl::StatusOr<proto::RestoreResponse> s =
                control.Restore(static_cast<int>(i), request, absl::Minutes(10));
            if (!s.ok()) {
              return absl::Status(s.status().code(),
                                  absl::StrCat("restoring ps ", i, " at ", ps[i].address,
                                               " from ", dir, ": ", s.status().message()));
            }
            restored[i] = *std::move(s);
            return absl::OkStatus();
          },
          kBusyBudget);
    }));
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    spdlog::info(
        "restored from {} (step {}, written by {} ps, loaded onto {}): every ps read the "
        "{:.1f} MB checkpoint in {:.2f} s ({:.0f} MB/s each)",
        dir, manifest.global_step(), manifest.shards_size(), ps.size(), report->total_bytes / 1e6,
        secs, secs > 0 ? report->total_bytes / 1e6 / secs : 0.0);
    return std::optional<proto::CheckpointManifest>(std::move(manifest));
  }
  return std::optional<proto::CheckpointManifest>();
}

struct EvalResult {
  nlohmann::json metrics;   // test_accuracy/test_loss, or test_auc/test_logloss
  std::string line;         // for the log
  int64_t global_step = 0;  // updates applied to the dense variables
};

absl::StatusOr<EvalResult> Evaluate(const proto::ClusterState& state, const ChiefOptions& options) {
  PST_ASSIGN_OR_RETURN(std::vector<worker::ModelVariable> variables,
                       worker::ModelVariables(options.training));
  const std::vector<std::string> addresses(state.ps_addresses().begin(),
                                           state.ps_addresses().end());
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<worker::PsClient> client,
      worker::PsClient::Create(state.plan(), worker::DenseNames(variables),
                               worker::MakeGrpcPsTransport(addresses, options.timing.rpc_timeout),
                               -1, 0));
  EvalResult result;
  if (options.training.model() == "wide_deep") {
    PST_ASSIGN_OR_RETURN(worker::CtrDataset held_out,
                         worker::LoadCtrSplit(options.training, /*held_out=*/true, 0, 1));
    PST_ASSIGN_OR_RETURN(worker::CtrEval eval,
                         worker::EvaluateWideDeep(options.training, held_out, client.get()));
    result.metrics = {
        {"test_auc", eval.auc}, {"test_logloss", eval.logloss}, {"test_examples", eval.examples}};
    result.line = absl::StrFormat("test AUC %.4f, test log-loss %.4f on %d held-out example(s)",
                                  eval.auc, eval.logloss, eval.examples);
    result.global_step = eval.version;
    return result;
  }
  PST_ASSIGN_OR_RETURN(worker::MlpConfig mlp_config, worker::MlpConfigFor(options.training));
  worker::Values params;
  PST_ASSIGN_OR_RETURN(result.global_step, client->Pull(&params));
  PST_ASSIGN_OR_RETURN(worker::Dataset test,
                       worker::LoadFashionMnist(options.data_dir, worker::Split::kTest));
  worker::Mlp model(mlp_config);
  PST_ASSIGN_OR_RETURN(
      worker::Mlp::Eval eval,
      model.Evaluate(params, test.features.data(), test.labels.data(), test.num_examples));
  result.metrics = {{"test_accuracy", eval.accuracy}, {"test_loss", eval.loss}};
  result.line = absl::StrFormat("test accuracy %.4f, test loss %.4f", eval.accuracy, eval.loss);
  return result;
}

absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << summary.dump(2) << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

// One recovery from a lost ps, for the log and the summary.
struct RecoveryRecord {
  std::string cause;
  absl::Time detected;
  absl::Time resumed;
  int64_t step_before = 0;  // global step when the loss was detected
  int64_t restored_step = 0;
};

// The chief's Prometheus metrics (--metrics_port): the coordinator's view,
// read at every scrape while the job runs, and the events Job records.
class ChiefMetrics {
 public:
  ChiefMetrics(common::MetricsExporter* exporter, const Coordinator* coordinator)
      : exporter_(exporter) {
    prometheus::Registry& r = exporter->registry();
    const prometheus::Labels& labels = exporter->labels();
    auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
      return prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(r);
    };
    auto& phase = gauge("pstrain_chief_phase", "1 for the job's current phase");
    for (int p = proto::Phase_MIN; p <= proto::Phase_MAX; ++p) {
      if (!proto::Phase_IsValid(p)) continue;
      phases_.emplace_back(p, &phase.Add({{"phase", proto::Phase_Name(p)}}));
    }
    global_step_ = &gauge("pstrain_chief_global_step", "Updates applied to the dense variables")
                        .Add({});
    live_workers_ =
        &gauge("pstrain_chief_live_workers", "Workers training (not done, not silent)").Add({});
    done_workers_ = &gauge("pstrain_chief_done_workers", "Workers that have finished").Add({});
    generation_ = &gauge("pstrain_chief_generation", "Restores so far").Add({});
    examples_ = &prometheus::BuildCounter()
                     .Name("pstrain_chief_examples_total")
                     .Help("Examples trained, summed over the workers")
                     .Labels(labels)
                     .Register(r)
                     .Add({});
    recoveries_ = &prometheus::BuildCounter()
                       .Name("pstrain_chief_recoveries_total")
                       .Help("Lost ps restored from a checkpoint")
                       .Labels(labels)
                       .Register(r)
                       .Add({});
    save_seconds_ = &prometheus::BuildHistogram()
                         .Name("pstrain_chief_checkpoint_seconds")
                         .Help("Time to save a checkpoint, from the first request to the manifest")
                         .Labels(labels)
                         .Register(r)
                         .Add({}, prometheus::Histogram::BucketBoundaries{
                                      0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
    refresher_ = exporter->AddRefresher([this, coordinator] {
      const Coordinator::Snapshot snap = coordinator->Check(absl::Now());
      for (const auto& [p, g] : phases_) g->Set(p == snap.phase ? 1 : 0);
      global_step_->Set(static_cast<double>(snap.global_step));
      live_workers_->Set(static_cast<double>(snap.active.size()));
      done_workers_->Set(snap.done);
      generation_->Set(static_cast<double>(snap.generation));
      common::RaiseCounterTo(*examples_, static_cast<double>(snap.examples));
    });
  }
  ~ChiefMetrics() { exporter_->RemoveRefresher(refresher_); }

  void Saved(double seconds) { save_seconds_->Observe(seconds); }
  void Recovered() { recoveries_->Increment(); }

 private:
  common::MetricsExporter* exporter_;
  int refresher_ = -1;
  std::vector<std::pair<int, prometheus::Gauge*>> phases_;
  prometheus::Gauge* global_step_;
  prometheus::Gauge* live_workers_;
  prometheus::Gauge* done_workers_;
  prometheus::Gauge* generation_;
  prometheus::Counter* examples_;
  prometheus::Counter* recoveries_;
  prometheus::Histogram* save_seconds_;
};

// The job from the chief's side: set up, watch, recover, finish.
class Job {
 public:
  Job(const ChiefOptions& options, const common::StopSignal& stop, Coordinator* coordinator,
      const proto::ClusterState& initial, int quorum)
      : options_(options),
        timing_(options.timing),
        stop_(stop),
        coordinator_(coordinator),
        initial_(initial),
        quorum_(quorum),
        control_(worker::MakeGrpcPsControl(options.tf.cluster.ps)) {
    const common::ClusterSpec& cluster = options.tf.cluster;
    ps_.resize(cluster.ps.size());
    for (size_t i = 0; i < ps_.size(); ++i) ps_[i].address = cluster.ps[i];
  }

  std::vector<PsPeer>& ps() { return ps_; }
  common::PsControl& control() { return *control_; }
  const std::vector<RecoveryRecord>& recoveries() const { return recoveries_; }
  int given_up() const { return given_up_; }

  // Creates the variables on every ps and decides where training starts: a
  // fresh job, the latest checkpoint, or (a restarted chief whose ps kept
  // their state) where the ps are now.
  absl::Status Start() {
    std::vector<absl::StatusOr<int>> created(ps_.size(), 0);
    PST_RETURN_IF_ERROR(CreateEverywhere(absl::Now() + timing_.startup_timeout, &created));
    int64_t max_generation = 0, min_generation = INT64_MAX;
    bool some_kept = false, some_lost = false;
    for (size_t i = 0; i < ps_.size(); ++i) {
      PST_ASSIGN_OR_RETURN(proto::HealthResponse health,
                           ProbePs(*control_, static_cast<int>(i), absl::Seconds(5)));
      ps_[i].incarnation = health.incarnation();
      ps_[i].last_ok = absl::Now();
      max_generation = std::max(max_generation, health.generation());
      min_generation = std::min(min_generation, health.generation());
      const int expected = VariablesOn(static_cast<int>(i));
      if (expected > 0 && *created[i] == 0) some_kept = true;
      if (expected > 0 && *created[i] > 0) some_lost = true;
      spdlog::info("{} at {} holds {} variable(s), {} element(s){}", health.task(), ps_[i].address,
                   health.num_variables(), health.num_elements(),
                   expected > 0 && *created[i] == 0
                       ? absl::StrCat(", kept from before (at version ", health.max_version(),
                                      ", generation ", health.generation(), ")")
                       : std::string());
    }
    if (some_kept && !some_lost && min_generation == max_generation) {
      // A restarted chief: the ps kept everything. Go on where they are;
      // live workers tell where they are when they register again.
      coordinator_->SetGeneration(max_generation);
      const std::vector<std::string> saved = common::ListCheckpoints(options_.checkpoint_dir);
      if (!saved.empty()) {
        absl::StatusOr<proto::CheckpointManifest> latest = common::ReadManifest(saved.front());
        if (latest.ok()) last_saved_step_ = latest->global_step();
      }
      spdlog::info("every ps kept its state: going on from there (generation {}), no restore",
                   max_generation);
      return absl::OkStatus();
    }
    const int64_t generation = some_kept ? max_generation + 1 : 0;
    coordinator_->SetGeneration(generation);
    if (options_.checkpoint_dir.empty()) {
      if (some_kept) return LostWithoutCheckpoint("a ps restarted while the chief was down");
      return absl::OkStatus();
    }
    PST_ASSIGN_OR_RETURN(std::optional<proto::CheckpointManifest> manifest,
                         RestoreLatest(*control_, ps_, options_, generation));
    if (!manifest.has_value()) {
      if (some_kept) return LostWithoutCheckpoint("a ps restarted while the chief was down");
      return absl::OkStatus();
    }
    ApplyRestored(*manifest);
    return absl::OkStatus();
  }

  // Watches until every worker is done and every ps answers with the
  // incarnation it was restored or created in. Called again after a ps
  // lost at the end of the job was recovered.
  absl::Status Watch() {
    const common::ClusterSpec& cluster = options_.tf.cluster;
    if (running_since_ == absl::InfinitePast()) {
      running_since_ = absl::Now();
      last_save_time_ = running_since_;
    }
    ProgressDisplay progress = StartProgress();
    for (;;) {
      stop_.WaitFor(timing_.heartbeat_interval);
      const absl::Time now = absl::Now();
      if (stop_.stopped()) {
        coordinator_->RequestStop(stop_.reason());
        coordinator_->WaitAllDone(absl::Seconds(5));
        return absl::CancelledError(stop_.reason());
      }
      Coordinator::Snapshot snap = coordinator_->Check(now);

      // A ps that restarted (a new incarnation) lost its variables; one
      // unreachable for --peer_timeout_s is taken for lost. Looked for
      // before the job may end too: the workers' last steps are on the ps.
      bool every_ps_answered = false;
      std::optional<std::string> lost = FindLostPs(now, &every_ps_answered);
      if (lost.has_value()) {
        PST_RETURN_IF_ERROR(Recover(*lost, snap.global_step));
        continue;
      }
      if (snap.all_done) {
        if (!every_ps_answered) continue;  // until it answers, or is taken for lost
        ShowProgress(snap, now, &progress, /*final=*/true);
        return absl::OkStatus();
      }
      if (!options_.checkpoint_dir.empty() &&
          ((options_.save_steps > 0 &&
            snap.global_step >= last_saved_step_ + options_.save_steps) ||
           (options_.save_secs > 0 &&
            now - last_save_time_ >= absl::Seconds(options_.save_secs)))) {
        const int64_t pushes_before = probed_pushes_;
        const absl::Time save_start = absl::Now();
        absl::StatusOr<SaveFigures> saved =
            SaveCheckpoint(*control_, ps_, options_, coordinator_->State(), snap.global_step,
                           snap.positions);
        last_save_time_ = absl::Now();
        if (saved.ok()) {
          last_saved_step_ = snap.global_step;
          RecordSave(*saved, pushes_before, save_start);
        } else {
          // A ps lost in the middle of a save: the next look at the ps
          // starts the recovery, from the previous checkpoint.
          spdlog::warn("checkpoint at step {} not saved: {}", snap.global_step,
                       saved.status().message());
        }
      }
      // A worker that finished, left or fell silent no longer counts: lower
      // the SYNC quorum and drop it from SSP's slowest clock, so nobody
      // waits for it. It counts again when it comes back.
      if (snap.active != active_ || membership_stale_) SendMembership(snap.active);
      for (size_t k = 0; k < snap.silent.size(); ++k) {
        const int w = snap.silent[k];
        if (snap.silent_for[k] > timing_.recovery_timeout) {
          spdlog::warn("worker {} sent no heartbeat for {}: giving up on it (--recovery_timeout_s)",
                       w, absl::FormatDuration(snap.silent_for[k]));
          coordinator_->GiveUp(w);
          ++given_up_;
        }
      }
      if (snap.registered < static_cast<int>(cluster.worker.size()) &&
          now - running_since_ > timing_.startup_timeout) {
        return absl::DeadlineExceededError(
            absl::StrCat("only ", snap.registered, " of ", cluster.worker.size(),
                         " worker(s) registered within --startup_timeout_s"));
      }
      if (events_ != nullptr && snap.global_step >= summary_step_ + options_.summary_steps) {
        WriteScalars(snap, now);
      }
      ShowProgress(snap, now, &progress);
    }
  }

  // After the end of the job failed with `failure` (the evaluation or the
  // final save): whether a ps was lost, in which case it was recovered and
  // the workers went back to redo their steps since the checkpoint. Waits
  // until every ps answers with its known incarnation (false), or one is
  // taken for lost (true).
  absl::StatusOr<bool> RecoverLostPs(const absl::Status& failure) {
    for (;;) {
      const absl::Time now = absl::Now();
      bool every_ps_answered = false;
      std::optional<std::string> lost = FindLostPs(now, &every_ps_answered);
      if (lost.has_value()) {
        spdlog::warn("the end of the job failed ({}), and {}", failure.message(), *lost);
        PST_RETURN_IF_ERROR(Recover(*lost, coordinator_->Check(now).global_step));
        return true;
      }
      if (every_ps_answered) return false;
      if (stop_.WaitFor(timing_.heartbeat_interval)) return absl::CancelledError(stop_.reason());
    }
  }

  // The progress display of --progress: a live line on a terminal, a log
  // line every --log_every_s elsewhere. Ends (the live line with a newline)
  // when destroyed.
  struct ProgressDisplay {
    std::unique_ptr<common::ProgressLine> line;          // null: --progress=off
    std::unique_ptr<common::LogAboveProgressLine> logs;  // log lines above the live one
    common::EtaEstimator eta;
    int64_t total_steps = 0;  // 0: unknown
  };

  ProgressDisplay StartProgress() {
    ProgressDisplay progress;
    const common::ProgressMode mode = common::ResolveProgressMode(options_.progress, STDERR_FILENO);
    if (mode == common::ProgressMode::kOff) return progress;
    // Only mlp's data tells its size cheaply (the IDX header); wide_deep's
    // would have to be read whole, so its total is known only from
    // --max_steps.
    int64_t examples = 0;
    if (options_.training.model() != "wide_deep") {
      absl::StatusOr<int> count =
          worker::CountFashionMnist(options_.data_dir, worker::Split::kTrain);
      if (count.ok()) examples = *count;
    }
    progress.total_steps = ExpectedFinalStep(
        initial_.training(), static_cast<int>(options_.tf.cluster.worker.size()), examples);
    if (mode == common::ProgressMode::kTty) {
      progress.line =
          common::ProgressLine::ForFd(STDERR_FILENO, /*terminal=*/true, timing_.log_every);
      progress.logs = std::make_unique<common::LogAboveProgressLine>(progress.line.get());
    } else {
      common::ProgressLine::Options plain;
      plain.plain_interval = timing_.log_every;
      // The log line, with its time and task, is what tests and log readers
      // (and pstrain local) look for.
      plain.emit_plain = [](const std::string& text) { spdlog::info("{}", text); };
      plain.write = [](absl::string_view text) {
        spdlog::info("{}", absl::StripSuffix(text, "\n"));
      };
      progress.line = std::make_unique<common::ProgressLine>(std::move(plain));
    }
    return progress;
  }

  // `final`: the job is done; shown whatever --log_every_s, and the live
  // line ends.
  void ShowProgress(const Coordinator::Snapshot& snap, absl::Time now, ProgressDisplay* progress,
                    bool final = false) {
    if (progress->line == nullptr) return;
    const double secs = absl::ToDoubleSeconds(now - running_since_);
    common::Progress p;
    p.step = snap.global_step;
    p.total_steps = progress->total_steps;
    p.epoch = snap.epoch + 1;
    p.total_epochs = options_.training.epochs();
    p.loss = snap.loss;
    p.examples_per_sec = secs > 0 ? snap.examples / secs : 0.0;
    p.eta = progress->eta.Update(snap.global_step, progress->total_steps, now);
    p.workers_done = snap.done;
    p.workers = static_cast<int>(options_.tf.cluster.worker.size());
    if (final) {
      progress->line->Finish(common::FormatProgress(p));
    } else {
      progress->line->Update(common::FormatProgress(p));
    }
  }

  absl::Time running_since() const { return running_since_; }
  void set_metrics(ChiefMetrics* metrics) { metrics_ = metrics; }

  // Opens the event file of --summary_dir (a failure is logged, not fatal:
  // the job goes on without summaries).
  void OpenEvents() {
    if (options_.summary_dir.empty()) return;
    absl::StatusOr<std::unique_ptr<common::EventWriter>> events =
        common::EventWriter::Open(options_.summary_dir);
    if (!events.ok()) {
      spdlog::warn("no TensorBoard summaries: {}", events.status().message());
      return;
    }
    events_ = *std::move(events);
    spdlog::info("TensorBoard summaries in {}", events_->path());
  }

  // Loss, examples/s and the staleness of the gradients applied since the
  // last scalars.
  void WriteScalars(const Coordinator::Snapshot& snap, absl::Time now) {
    std::vector<std::pair<std::string, float>> scalars = {{"loss", snap.loss}};
    if (summary_time_ != absl::Time() && now > summary_time_) {
      scalars.emplace_back("examples_per_sec", (snap.examples - summary_examples_) /
                                                   absl::ToDoubleSeconds(now - summary_time_));
    }
    if (probed_applied_ > summary_applied_) {
      scalars.emplace_back("staleness", static_cast<double>(probed_staleness_sum_ -
                                                            summary_staleness_sum_) /
                                            (probed_applied_ - summary_applied_));
    }
    absl::Status written = events_->AddScalars(snap.global_step, scalars, now);
    if (written.ok()) written = events_->Flush();
    if (!written.ok()) spdlog::warn("TensorBoard summary not written: {}", written.message());
    summary_step_ = snap.global_step;
    summary_time_ = now;
    summary_examples_ = snap.examples;
    summary_applied_ = probed_applied_;
    summary_staleness_sum_ = probed_staleness_sum_;
  }

  // The test metrics at the step they were measured.
  void WriteFinalScalars(const nlohmann::json& metrics, int64_t step) {
    if (events_ == nullptr) return;
    std::vector<std::pair<std::string, float>> scalars;
    for (const auto& [name, value] : metrics.items()) {
      if (value.is_number_float()) scalars.emplace_back(name, value.get<double>());
    }
    absl::Status written = events_->AddScalars(step, scalars);
    if (written.ok()) written = events_->Flush();
    if (!written.ok()) spdlog::warn("TensorBoard summary not written: {}", written.message());
  }

  // One periodic save, with the training throughput during it and between
  // saves (pushes applied per second on the busiest ps).
  struct SaveRecord {
    SaveFigures figures;
    double pushes_per_sec_during = 0;
    double pushes_per_sec_between = -1;  // -1: not measured (the first save)
  };
  const std::vector<SaveRecord>& saves() const { return saves_; }

 private:
  int VariablesOn(int ps_index) const {
    int n = 0;
    for (const auto& entry : initial_.plan().variables()) n += entry.ps_index() == ps_index;
    return n;
  }

  // CreateVariables on every ps in parallel (idempotent: a ps that kept its
  // variables creates none).
  absl::Status CreateEverywhere(absl::Time deadline, std::vector<absl::StatusOr<int>>* created) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ps_.size(); ++i) {
      threads.emplace_back([&, i] {
        proto::CreateVariablesRequest request;
        *request.mutable_optimizer() = options_.training.optimizer();
        *request.mutable_sync() = initial_.training().sync();
        for (const auto& entry : initial_.plan().variables()) {
          if (entry.ps_index() == static_cast<int>(i)) *request.add_variables() = entry.spec();
        }
        (*created)[i] = CreateOnPs(*control_, static_cast<int>(i), &ps_[i], request, deadline, stop_);
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::StatusOr<int>& c : *created) PST_RETURN_IF_ERROR(c.status());
    return absl::OkStatus();
  }

  absl::Status LostWithoutCheckpoint(const std::string& cause) const {
    return absl::DataLossError(absl::StrCat(
        cause, ", and there is no checkpoint to restore the ps from",
        options_.checkpoint_dir.empty()
            ? " (run with --checkpoint_dir and --save_checkpoints_steps or _secs to make them)"
            : absl::StrCat(" in ", options_.checkpoint_dir)));
  }

  void ApplyRestored(const proto::CheckpointManifest& manifest) {
    std::vector<int64_t> positions(manifest.worker_positions().begin(),
                                   manifest.worker_positions().end());
    if (positions.size() != options_.tf.cluster.worker.size()) {
      spdlog::warn(
          "the checkpoint has data positions for {} worker(s), this job has {}: every worker "
          "starts its data from the beginning",
          positions.size(), options_.tf.cluster.worker.size());
      positions.assign(options_.tf.cluster.worker.size(), 0);
    }
    coordinator_->ResetProgress(manifest.global_step(), positions);
    last_saved_step_ = manifest.global_step();
  }

  void RecordSave(const SaveFigures& figures, int64_t pushes_before, absl::Time start) {
    if (figures.bytes == 0) return;  // that step was saved already
    if (metrics_ != nullptr) metrics_->Saved(figures.seconds);
    SaveRecord record;
    record.figures = figures;
    if (figures.seconds > 0) {
      record.pushes_per_sec_during = figures.pushes_during / figures.seconds;
    }
    const double between = absl::ToDoubleSeconds(start - after_save_time_);
    if (after_save_pushes_ >= 0 && between > 0) {
      record.pushes_per_sec_between = (pushes_before - after_save_pushes_) / between;
      spdlog::info(
          "training during the save: {:.0f} pushes/s; between saves: {:.0f} pushes/s "
          "({:.2f}x)",
          record.pushes_per_sec_during, record.pushes_per_sec_between,
          record.pushes_per_sec_between > 0
              ? record.pushes_per_sec_during / record.pushes_per_sec_between
              : 0.0);
    }
    after_save_pushes_ = pushes_before + figures.pushes_during;
    after_save_time_ = absl::Now();
    saves_.push_back(record);
  }

  // Probes every ps; describes the first one lost, if any. Sets
  // `*every_ps_answered` (when given) to whether each answered this time.
  std::optional<std::string> FindLostPs(absl::Time now, bool* every_ps_answered = nullptr) {
    std::vector<absl::StatusOr<proto::HealthResponse>> health(ps_.size(),
                                                              absl::UnknownError("not probed"));
    ForEachPs(ps_.size(), [&](size_t i) {
      health[i] = ProbePs(*control_, static_cast<int>(i), timing_.heartbeat_interval + absl::Seconds(1));
      return absl::OkStatus();
    }).IgnoreError();
    if (every_ps_answered != nullptr) {
      *every_ps_answered = std::all_of(health.begin(), health.end(),
                                       [](const auto& h) { return h.ok(); });
    }
    if (std::all_of(health.begin(), health.end(), [](const auto& h) { return h.ok(); })) {
      int64_t max_version = 0;
      for (const auto& h : health) max_version = std::max(max_version, h->max_version());
      coordinator_->SetVersionCeiling(max_version);
    }
    for (size_t i = 0; i < ps_.size(); ++i) {
      if (health[i].ok() && health[i]->incarnation() != ps_[i].incarnation) {
        return absl::StrCat("ps ", i, " at ", ps_[i].address,
                            " restarted (a new incarnation) and lost its variables");
      }
      if (health[i].ok()) {
        probed_pushes_ = std::max(probed_pushes_, health[i]->pushes_applied());
        if (health[i]->gradients_applied() > probed_applied_) {
          probed_applied_ = health[i]->gradients_applied();
          probed_staleness_sum_ = health[i]->staleness_sum();
        }
        ps_[i].last_ok = now;
      } else if (now - ps_[i].last_ok > timing_.peer_timeout) {
        return absl::StrCat("ps ", i, " at ", ps_[i].address, " has not answered for ",
                            absl::FormatDuration(now - ps_[i].last_ok), ": ",
                            health[i].status().message());
      }
    }
    if (after_save_pushes_ < 0) {  // the first look: where "between saves" starts
      after_save_pushes_ = probed_pushes_;
      after_save_time_ = now;
    }
    return std::nullopt;
  }

  // RUNNING -> RECOVERING -> RUNNING: waits for every ps to answer, creates
  // the variables of the restarted ones, restores every ps from the latest
  // checkpoint (a consistent cut), and sends the workers back to their
  // positions in it.
  absl::Status Recover(const std::string& cause, int64_t step_before) {
    RecoveryRecord record;
    record.cause = cause;
    record.detected = absl::Now();
    record.step_before = step_before;
    const int64_t generation = coordinator_->BeginRecovery();
    spdlog::warn("{}: recovering (generation {}); workers pause until every ps is restored", cause,
                 generation);
    if (options_.checkpoint_dir.empty()) return LostWithoutCheckpoint(cause);
    const std::vector<std::string> saved = common::ListCheckpoints(options_.checkpoint_dir);
    const std::string latest = saved.empty() ? "none" : saved.front();
    const absl::Time deadline = record.detected + timing_.recovery_timeout;
    for (size_t i = 0; i < ps_.size(); ++i) {
      for (;;) {
        absl::StatusOr<proto::HealthResponse> health =
            ProbePs(*control_, static_cast<int>(i), absl::Seconds(1));
        if (health.ok()) {
          ps_[i].incarnation = health->incarnation();
          ps_[i].last_ok = absl::Now();
          break;
        }
        if (absl::Now() > deadline) {
          return absl::UnavailableError(absl::StrCat(
              "ps ", i, " at ", ps_[i].address, " did not come back within --recovery_timeout_s (",
              absl::FormatDuration(timing_.recovery_timeout), "): ", health.status().message(),
              ". The checkpoints in ", options_.checkpoint_dir, " are intact (latest: ", latest,
              "); start the job again to resume from it"));
        }
        if (stop_.WaitFor(timing_.heartbeat_interval)) {
          return absl::CancelledError(stop_.reason());
        }
      }
    }
    std::vector<absl::StatusOr<int>> created(ps_.size(), 0);
    PST_RETURN_IF_ERROR(CreateEverywhere(deadline, &created));
    PST_ASSIGN_OR_RETURN(std::optional<proto::CheckpointManifest> manifest,
                         RestoreLatest(*control_, ps_, options_, generation));
    if (!manifest.has_value()) return LostWithoutCheckpoint(cause);
    ApplyRestored(*manifest);
    after_save_pushes_ = -1;  // the ps counts started again
    probed_pushes_ = 0;
    membership_stale_ = true;  // a restarted ps knows nothing of who left
    SendMembership(coordinator_->Check(absl::Now()).active);
    coordinator_->SetPhase(proto::PHASE_RUNNING);
    record.resumed = absl::Now();
    record.restored_step = manifest->global_step();
    spdlog::info(
        "recovered in {:.2f} s: every ps restored to step {} ({} step(s) since that checkpoint "
        "are redone); training resumes",
        absl::ToDoubleSeconds(record.resumed - record.detected), record.restored_step,
        std::max<int64_t>(0, step_before - record.restored_step));
    recoveries_.push_back(record);
    if (metrics_ != nullptr) metrics_->Recovered();
    return absl::OkStatus();
  }

  void SendMembership(const std::vector<int>& active) {
    active_ = active;
    membership_stale_ = false;
    proto::MembershipRequest membership;
    for (int w : active) membership.add_active_workers(w);
    membership.set_replicas_to_aggregate(quorum_);
    for (size_t i = 0; i < ps_.size(); ++i) {
      absl::StatusOr<proto::MembershipResponse> s =
          control_->SetMembership(static_cast<int>(i), membership, absl::Seconds(5));
      if (!s.ok()) {
        membership_stale_ = true;  // try again next time
        spdlog::warn("could not update membership on {}: {}", ps_[i].address,
                     s.status().message());
      }
    }
    if (initial_.training().sync().mode() != proto::ASYNC) {
      spdlog::info("{} worker(s) still training; sync quorum now {}", active.size(),
                   std::max<size_t>(1, std::min<size_t>(quorum_, active.size())));
    }
  }

  const ChiefOptions& options_;
  const common::Timing& timing_;
  const common::StopSignal& stop_;
  Coordinator* const coordinator_;
  const proto::ClusterState& initial_;
  const int quorum_;
  const std::unique_ptr<common::PsControl> control_;
  std::vector<PsPeer> ps_;
  int64_t last_saved_step_ = 0;
  absl::Time last_save_time_;
  absl::Time running_since_ = absl::InfinitePast();
  std::vector<int> active_;  // workers taking part, as last told to the ps
  bool membership_stale_ = false;
  std::vector<RecoveryRecord> recoveries_;
  int given_up_ = 0;
  // Throughput around saves: the busiest ps's pushes_applied at the last
  // probe, and at the end of the last save (-1: not yet known).
  int64_t probed_pushes_ = 0;
  int64_t after_save_pushes_ = -1;
  absl::Time after_save_time_;
  std::vector<SaveRecord> saves_;
  // TensorBoard (--summary_dir): the writer, and the figures at the last
  // scalars written. The busiest ps's applied gradients and their summed
  // staleness, at the last probe.
  std::unique_ptr<common::EventWriter> events_;
  ChiefMetrics* metrics_ = nullptr;  // not owned; null without --metrics_port
  int64_t summary_step_ = 0;
  absl::Time summary_time_;
  int64_t summary_examples_ = 0;
  int64_t probed_applied_ = 0;
  int64_t probed_staleness_sum_ = 0;
  int64_t summary_applied_ = 0;
  int64_t summary_staleness_sum_ = 0;
};

}  // namespace

int64_t ExpectedFinalStep(const proto::TrainingConfig& training, int num_workers,
                          int64_t num_examples) {
  int64_t from_epochs = 0;
  const int64_t batch = training.batch_size();
  if (num_examples > 0 && batch > 0 && num_workers > 0) {
    const bool sync = training.sync().mode() == proto::SYNC;
    for (int64_t i = 0; i < num_workers; ++i) {
      const int64_t shard =
          num_examples > i ? (num_examples - i + num_workers - 1) / num_workers : 0;
      const int64_t batches = (shard + batch - 1) / batch * training.epochs();
      from_epochs = sync ? std::max(from_epochs, batches) : from_epochs + batches;
    }
  }
  if (training.max_steps() > 0) {
    return from_epochs > 0 ? std::min(from_epochs, training.max_steps()) : training.max_steps();
  }
  return from_epochs;
}

absl::Status RunChief(const ChiefOptions& options, const common::StopSignal& stop) {
  const absl::Time job_start = absl::Now();
  const common::ClusterSpec& cluster = options.tf.cluster;
  const common::Timing& timing = options.timing;

  // Plan.
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan plan,
                       worker::BuildPlan(options.training, static_cast<int>(cluster.ps.size())));
  proto::ClusterState initial;
  *initial.mutable_plan() = plan;
  for (const std::string& address : cluster.ps) initial.add_ps_addresses(address);
  initial.set_num_workers(static_cast<int>(cluster.worker.size()));
  *initial.mutable_training() = options.training;
  proto::SyncConfig* sync = initial.mutable_training()->mutable_sync();
  sync->set_num_workers(static_cast<int>(cluster.worker.size()));
  if (sync->replicas_to_aggregate() > sync->num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas_to_aggregate=", sync->replicas_to_aggregate(), " exceeds the ",
                     sync->num_workers(), " worker(s) in the cluster"));
  }
  const int quorum =
      sync->replicas_to_aggregate() > 0 ? sync->replicas_to_aggregate() : sync->num_workers();
  spdlog::info("mode {}{}", absl::AsciiStrToLower(proto::SyncMode_Name(sync->mode())),
               sync->mode() == proto::SYNC ? absl::StrCat(": ", quorum, " of ", sync->num_workers(),
                                                          " gradients averaged per step")
               : sync->mode() == proto::SSP ? absl::StrCat(": staleness ", sync->staleness())
                                            : std::string());
  const std::vector<int64_t> bytes = common::BytesPerPs(plan);
  spdlog::info("placement ({}): {} variable(s) over {} ps, bytes per ps: [{}]", plan.policy(),
               plan.variables_size(), plan.num_ps(), absl::StrJoin(bytes, ", "));

  // Serve the coordinator from the start, so workers can find it; they are
  // told to retry until the variables exist.
  Coordinator coordinator(initial, timing.peer_timeout);
  std::optional<ChiefMetrics> metrics;
  if (common::ProcessMetrics() != nullptr) metrics.emplace(common::ProcessMetrics(), &coordinator);
  GrpcCoordinatorService service(&coordinator);
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<grpc::Server> server,
      common::StartServer(cluster.CoordinatorAddress(),
                          {{&service, proto::Coordinator::service_full_name()}}, options.bind));
  spdlog::info("coordinator serving on {} (advertised as {}, {})",
               common::ListenAddress(cluster.CoordinatorAddress(), options.bind),
               cluster.CoordinatorAddress(),
               common::DescribeTransportSecurity(common::GetTransportSecurity()));

  Job job(options, stop, &coordinator, initial, quorum);
  absl::Status status = [&]() -> absl::Status {
    if (metrics.has_value()) job.set_metrics(&*metrics);
    PST_RETURN_IF_ERROR(job.Start());
    job.OpenEvents();
    coordinator.SetPhase(proto::PHASE_RUNNING);
    spdlog::info("variables ready; waiting for {} worker(s)", cluster.worker.size());
    std::vector<PsPeer>& ps = job.ps();
    Coordinator::Snapshot final_snap;
    EvalResult eval;
    for (;;) {
      PST_RETURN_IF_ERROR(job.Watch());
      final_snap = coordinator.Check(absl::Now());
      if (final_snap.left_early == static_cast<int>(cluster.worker.size())) {
        return absl::AbortedError("every worker left before finishing; see their logs");
      }
      spdlog::info("every worker has finished at global step {}: evaluating{}",
                   final_snap.global_step,
                   options.checkpoint_dir.empty() ? "" : " and saving the final checkpoint");
      absl::Status finished = [&]() -> absl::Status {
        PST_ASSIGN_OR_RETURN(eval, Evaluate(coordinator.State(), options));
        if (options.checkpoint_dir.empty()) return absl::OkStatus();
        return SaveCheckpoint(job.control(), ps, options, coordinator.State(), eval.global_step,
                              final_snap.positions)
            .status();
      }();
      if (finished.ok()) break;
      // A ps lost now is recovered as during training: the restore takes
      // back the workers' last steps, so they redo them and finish again.
      PST_ASSIGN_OR_RETURN(const bool recovered, job.RecoverLostPs(finished));
      if (!recovered) return finished;
    }
    job.WriteFinalScalars(eval.metrics, eval.global_step);
    // Training ended when the last worker said so, not at the next poll.
    const absl::Time ended =
        final_snap.last_done > job.running_since() ? final_snap.last_done : absl::Now();
    const double train_secs = absl::ToDoubleSeconds(ended - job.running_since());
    const double examples_per_sec = train_secs > 0 ? final_snap.examples / train_secs : 0;
    spdlog::info("done: {}, global step {}, {:.0f} examples/s, {:.1f} s training", eval.line,
                 eval.global_step, examples_per_sec, train_secs);
    // Rows each ps created for hash embeddings (0 without them), and the
    // training-mode figures. Every push reaches each ps holding dense
    // variables, so counts are taken from the ps that saw the most.
    std::vector<int64_t> hash_rows;
    int64_t applied = 0, staleness_sum = 0, staleness_max = 0, stale_dropped = 0, duplicates = 0,
            max_clock_gap = 0;
    double parked_seconds = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      absl::StatusOr<proto::HealthResponse> health =
          ProbePs(job.control(), static_cast<int>(i), absl::Seconds(5));
      hash_rows.push_back(health.ok() ? health->hash_rows() : -1);
      if (!health.ok()) continue;
      if (health->gradients_applied() > applied) {
        applied = health->gradients_applied();
        staleness_sum = health->staleness_sum();
      }
      staleness_max = std::max(staleness_max, health->staleness_max());
      stale_dropped = std::max(stale_dropped, health->stale_dropped());
      duplicates = std::max(duplicates, health->duplicates_ignored());
      max_clock_gap = std::max(max_clock_gap, health->max_clock_gap());
      parked_seconds = std::max(parked_seconds, health->parked_seconds());
    }
    const double mean_staleness = applied > 0 ? double(staleness_sum) / applied : 0.0;
    spdlog::info(
        "mode {}: staleness mean {:.2f} max {}, {} stale gradient(s) dropped, {} "
        "duplicate(s) ignored, {:.1f} s waited at barriers",
        absl::AsciiStrToLower(proto::SyncMode_Name(initial.training().sync().mode())),
        mean_staleness, staleness_max, stale_dropped, duplicates, parked_seconds);
    if (options.training.model() == "wide_deep" && options.training.buckets_per_field() == 0) {
      spdlog::info("hash embedding rows per ps: [{}]", absl::StrJoin(hash_rows, ", "));
    }
    if (!options.summary_json.empty()) {
      nlohmann::json summary = eval.metrics;
      summary["hash_rows_per_ps"] = hash_rows;
      summary["mode"] =
          absl::AsciiStrToLower(proto::SyncMode_Name(initial.training().sync().mode()));
      summary["staleness_mean"] = mean_staleness;
      summary["staleness_max"] = staleness_max;
      summary["stale_dropped"] = stale_dropped;
      summary["duplicates_ignored"] = duplicates;
      summary["barrier_wait_seconds"] = parked_seconds;
      summary["max_clock_gap"] = max_clock_gap;
      nlohmann::json recoveries = nlohmann::json::array();
      for (const RecoveryRecord& r : job.recoveries()) {
        recoveries.push_back({
            {"cause", r.cause},
            {"detected_unix_ms", absl::ToUnixMillis(r.detected)},
            {"resumed_unix_ms", absl::ToUnixMillis(r.resumed)},
            {"seconds", absl::ToDoubleSeconds(r.resumed - r.detected)},
            {"restored_step", r.restored_step},
            {"steps_lost", std::max<int64_t>(0, r.step_before - r.restored_step)},
        });
      }
      summary["recoveries"] = recoveries;
      nlohmann::json saves = nlohmann::json::array();
      double ratio_sum = 0;
      int ratios = 0;
      for (const Job::SaveRecord& s : job.saves()) {
        nlohmann::json entry = {
            {"step", s.figures.step},
            {"mb", s.figures.bytes / 1e6},
            {"seconds", s.figures.seconds},
            {"mb_per_sec", s.figures.seconds > 0 ? s.figures.bytes / 1e6 / s.figures.seconds : 0},
            {"snapshot_ms", s.figures.snapshot_seconds * 1e3},
            {"locked_ms", s.figures.locked_seconds * 1e3},
            {"pushes_per_sec_during", s.pushes_per_sec_during},
        };
        if (s.pushes_per_sec_between > 0) {
          entry["pushes_per_sec_between"] = s.pushes_per_sec_between;
          ratio_sum += s.pushes_per_sec_during / s.pushes_per_sec_between;
          ++ratios;
        }
        saves.push_back(entry);
      }
      summary["saves"] = saves;
      if (ratios > 0) summary["throughput_during_save_ratio"] = ratio_sum / ratios;
      summary["workers_given_up"] = job.given_up();
      summary["workers_left_early"] = final_snap.left_early;
      summary.update({
          {"model", options.training.model()},
          {"global_step", eval.global_step},
          {"pushes", final_snap.pushes},
          {"examples", final_snap.examples},
          {"examples_per_sec", examples_per_sec},
          {"train_seconds", train_secs},
          {"wall_seconds", absl::ToDoubleSeconds(absl::Now() - job_start)},
          {"num_workers", cluster.worker.size()},
          {"num_ps", cluster.ps.size()},
      });
      PST_RETURN_IF_ERROR(WriteSummary(options.summary_json, summary));
      spdlog::info("wrote {}", options.summary_json);
    }
    return absl::OkStatus();
  }();

  coordinator.SetPhase(proto::PHASE_DONE);
  coordinator.RequestStop(status.ok() ? "job done" : std::string(status.message()));
  // Workers that finished their share wait for this answer before exiting;
  // give each live one a heartbeat or two to hear it.
  if (!coordinator.WaitStopSeen(2 * timing.heartbeat_interval + absl::Seconds(1))) {
    spdlog::warn("not every worker heard that the job ended; stopping anyway");
  }
  ShutdownAllPs(job.control(),
                status.ok() ? "job done" : absl::StrCat("job failed: ", status.message()));
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return status;
}

}  // namespace pst::chief
