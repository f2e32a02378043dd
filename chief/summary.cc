#include "chief/summary.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/job.h"
#include "chief/ps_peers.h"
#include "chief/step_advice.h"
#include "common/logging.h"
#include "common/lr_schedule.h"
#include "common/status_macros.h"

namespace pst::chief {
namespace {

// Whether the plan holds a hash embedding (rows created on first use).
bool HasHashTable(const proto::PlacementPlan& plan) {
  for (const auto& entry : plan.variables()) {
    if (entry.spec().routing() == proto::HASH) return true;
  }
  return false;
}

}  // namespace

ChiefMetrics::ChiefMetrics(common::MetricsExporter* exporter, const Coordinator* coordinator,
                           proto::OptimizerConfig optimizer)
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
  global_step_ =
      &gauge("pstrain_chief_global_step", "Updates applied to the dense variables").Add({});
  live_workers_ =
      &gauge("pstrain_chief_live_workers", "Workers training (not done, not silent)").Add({});
  done_workers_ = &gauge("pstrain_chief_done_workers", "Workers that have finished").Add({});
  generation_ = &gauge("pstrain_chief_generation", "Restores so far").Add({});
  learning_rate_ = &gauge("pstrain_chief_learning_rate",
                          "The optimizer's learning rate at the global step (its schedule's)")
                        .Add({});
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
  steps_redone_ = &prometheus::BuildCounter()
                       .Name("pstrain_chief_steps_redone_total")
                       .Help("Batches a worker trained again after the ps were restored from a "
                             "checkpoint")
                       .Labels(labels)
                       .Register(r);
  failovers_ = &prometheus::BuildCounter()
                    .Name("pstrain_chief_failovers_total")
                    .Help("Replicated jobs: lost ps whose shards' backups took over (no restore)")
                    .Labels(labels)
                    .Register(r)
                    .Add({});
  save_seconds_ = &prometheus::BuildHistogram()
                       .Name("pstrain_chief_checkpoint_seconds")
                       .Help("Time to save a checkpoint, from the first request to the manifest")
                       .Labels(labels)
                       .Register(r)
                       .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.05, 0.1, 0.25, 0.5,
                                                                        1, 2.5, 5, 10, 30, 60});
  refresher_ = exporter->AddRefresher([this, coordinator, optimizer = std::move(optimizer)] {
    const Coordinator::Snapshot snap = coordinator->Check(absl::Now());
    for (const auto& [p, g] : phases_) g->Set(p == snap.phase ? 1 : 0);
    global_step_->Set(static_cast<double>(snap.global_step));
    live_workers_->Set(static_cast<double>(snap.active.size()));
    done_workers_->Set(snap.done);
    generation_->Set(static_cast<double>(snap.generation));
    learning_rate_->Set(common::ScheduledRate(optimizer, snap.global_step));
    common::RaiseCounterTo(*examples_, static_cast<double>(snap.examples));
  });
}

ChiefMetrics::~ChiefMetrics() {
  exporter_->RemoveRefresher(refresher_);
  if (replica_refresher_ >= 0) exporter_->RemoveRefresher(replica_refresher_);
}

int64_t RecoveryRecord::steps_redone_total() const {
  return std::accumulate(steps_redone.begin(), steps_redone.end(), int64_t{0});
}

void ChiefMetrics::StepsRedone(int worker, int64_t steps) {
  common::RaiseCounterTo(steps_redone_->Add({{"worker", std::to_string(worker)}}),
                         static_cast<double>(steps));
}

void ChiefMetrics::WatchReplicas(const ReplicaView* view) {
  if (!view->enabled() || replica_refresher_ >= 0) return;
  auto& family = prometheus::BuildGauge()
                     .Name("pstrain_chief_backup_in_sync")
                     .Help(
                         "Replicated jobs: 1 while a shard's backup takes every change of its "
                         "primary, 0 once it is out of sync")
                     .Labels(exporter_->labels())
                     .Register(exporter_->registry());
  replica_refresher_ = exporter_->AddRefresher([view, &family] {
    for (const ReplicaView::Shard& s : view->shards()) {
      family
          .Add({{"shard", std::to_string(s.shard)},
                {"primary", std::to_string(s.primary)},
                {"backup", std::to_string(s.backup)}})
          .Set(s.in_sync() ? 1 : 0);
    }
  });
}

void TrainingEvents::Open(const std::string& dir) {
  if (dir.empty()) return;
  absl::StatusOr<std::unique_ptr<common::EventWriter>> events = common::EventWriter::Open(dir);
  if (!events.ok()) {
    spdlog::warn("no TensorBoard summaries: {}", events.status().message());
    return;
  }
  events_ = *std::move(events);
  spdlog::info("TensorBoard summaries in {}", events_->path());
}

void TrainingEvents::Write(const Coordinator::Snapshot& snap, absl::Time now, int64_t applied,
                           int64_t staleness_sum, double learning_rate) {
  std::vector<std::pair<std::string, float>> scalars = {{"loss", snap.loss},
                                                        {"learning_rate", learning_rate}};
  if (summary_time_ != absl::Time() && now > summary_time_) {
    scalars.emplace_back("examples_per_sec", (snap.examples - summary_examples_) /
                                                 absl::ToDoubleSeconds(now - summary_time_));
  }
  if (applied > summary_applied_) {
    scalars.emplace_back("staleness", static_cast<double>(staleness_sum - summary_staleness_sum_) /
                                          (applied - summary_applied_));
  }
  absl::Status written = events_->AddScalars(snap.global_step, scalars, now);
  if (written.ok()) written = events_->Flush();
  if (!written.ok()) spdlog::warn("TensorBoard summary not written: {}", written.message());
  summary_step_ = snap.global_step;
  summary_time_ = now;
  summary_examples_ = snap.examples;
  summary_applied_ = applied;
  summary_staleness_sum_ = staleness_sum;
}

void TrainingEvents::WriteFinal(const nlohmann::json& metrics, int64_t step) {
  WriteMetrics(metrics, step, "");
}

void TrainingEvents::WriteEval(const nlohmann::json& metrics, int64_t step) {
  WriteMetrics(metrics, step, "eval/");
}

void TrainingEvents::WriteMetrics(const nlohmann::json& metrics, int64_t step,
                                  absl::string_view prefix) {
  if (events_ == nullptr) return;
  std::vector<std::pair<std::string, float>> scalars;
  for (const auto& [name, value] : metrics.items()) {
    if (value.is_number_float())
      scalars.emplace_back(absl::StrCat(prefix, name), value.get<double>());
  }
  absl::Status written = events_->AddScalars(step, scalars);
  if (written.ok()) written = events_->Flush();
  if (!written.ok()) spdlog::warn("TensorBoard summary not written: {}", written.message());
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

absl::Status ReportJob(Job& job, const ChiefOptions& options, const proto::ClusterState& initial,
                       const EvalResult& eval, const Coordinator::Snapshot& final_snap,
                       absl::Time job_start) {
  const common::ClusterSpec& cluster = options.tf.cluster;
  job.events().WriteFinal(eval.metrics, eval.global_step);
  // Training ended when the last worker said so, not at the next poll.
  const absl::Time ended =
      final_snap.last_done > job.running_since() ? final_snap.last_done : job.clock().Now();
  const double train_secs = absl::ToDoubleSeconds(ended - job.running_since());
  const double examples_per_sec = train_secs > 0 ? final_snap.examples / train_secs : 0;
  spdlog::info("done: {}, global step {}, {:.0f} examples/s, {:.1f} s training", eval.line,
               eval.global_step, examples_per_sec, train_secs);
  const StepAdvice steps = AdviseOnSteps(final_snap.step_times, initial.training());
  if (steps.worker >= 0) spdlog::info("{}", steps.line);
  // Rows each ps created for hash embeddings (0 without them), and the
  // training-mode figures. Every push reaches each ps holding dense
  // variables, so counts are taken from the ps that saw the most.
  std::vector<int64_t> hash_rows, table_evictions, rows_on_disk;
  int64_t applied = 0, staleness_sum = 0, staleness_max = 0, stale_dropped = 0, duplicates = 0,
          max_clock_gap = 0;
  double parked_seconds = 0;
  for (int i = 0; i < job.control().num_ps(); ++i) {
    absl::StatusOr<proto::HealthResponse> health = ProbePs(job.control(), i, absl::Seconds(5));
    hash_rows.push_back(health.ok() ? health->hash_rows() : -1);
    table_evictions.push_back(health.ok() ? health->table_evictions() : -1);
    rows_on_disk.push_back(health.ok() ? health->table_rows_on_disk() : -1);
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
      absl::AsciiStrToLower(proto::SyncMode_Name(initial.training().sync().mode())), mean_staleness,
      staleness_max, stale_dropped, duplicates, parked_seconds);
  if (HasHashTable(initial.plan())) {
    spdlog::info("hash embedding rows per ps: [{}] in memory, [{}] on disk; rows evicted per ps: [{}]",
                 absl::StrJoin(hash_rows, ", "), absl::StrJoin(rows_on_disk, ", "),
                 absl::StrJoin(table_evictions, ", "));
  }
  if (!options.summary_json.empty()) {
    nlohmann::json summary = eval.metrics;
    if (HasHashTable(initial.plan())) {
      summary["hash_rows_per_ps"] = hash_rows;
      summary["table_evictions_per_ps"] = table_evictions;
      summary["table_rows_on_disk_per_ps"] = rows_on_disk;
    }
    summary["mode"] = absl::AsciiStrToLower(proto::SyncMode_Name(initial.training().sync().mode()));
    summary["step_times"] = StepTimesJson(final_snap.step_times);
    if (steps.worker >= 0) {
      summary["slowest_worker"] = steps.worker;
      summary["communication_share"] = steps.communication_share;
      summary["advice"] = steps.advice;
    }
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
          {"steps_redone", r.steps_redone},
          {"steps_redone_total", r.steps_redone_total()},
          {"steps_redone_reported", r.redone_reported},
      });
    }
    summary["recoveries"] = recoveries;
    std::vector<int64_t> redone(initial.num_workers(), 0);
    for (const RecoveryRecord& r : job.recoveries()) {
      for (size_t w = 0; w < r.steps_redone.size() && w < redone.size(); ++w) {
        redone[w] += r.steps_redone[w];
      }
    }
    summary["steps_redone"] = redone;
    summary["steps_redone_total"] = std::accumulate(redone.begin(), redone.end(), int64_t{0});
    if (job.replicas().enabled()) {
      summary["replication"] = job.replicas().ToJson();
      nlohmann::json failovers = nlohmann::json::array();
      for (const FailoverRecord& f : job.failovers()) {
        nlohmann::json shards = nlohmann::json::array();
        for (size_t k = 0; k < f.shards.size(); ++k) {
          nlohmann::json shard = {{"shard", f.shards[k]}, {"new_primary", f.promoted_to[k]}};
          if (f.first_change[k] != absl::InfinitePast()) {
            shard["first_push_unix_ms"] = absl::ToUnixMillis(f.first_change[k]);
            shard["first_push_after_detection_seconds"] =
                absl::ToDoubleSeconds(f.first_change[k] - f.detected);
          }
          shards.push_back(std::move(shard));
        }
        failovers.push_back({
            {"cause", f.cause},
            {"lost_ps", f.lost_ps},
            {"shards", std::move(shards)},
            {"detected_unix_ms", absl::ToUnixMillis(f.detected)},
            {"promoted_unix_ms", absl::ToUnixMillis(f.promoted)},
            {"seconds", absl::ToDoubleSeconds(f.promoted - f.detected)},
            {"steps_lost", std::max<int64_t>(0, f.step_before - f.step_after)},
        });
      }
      summary["failovers"] = std::move(failovers);
      nlohmann::json resyncs = nlohmann::json::array();
      for (const ResyncRecord& r : job.resyncs()) {
        nlohmann::json entry = {{"shard", r.shard},
                                {"primary", r.primary},
                                {"backup", r.backup},
                                {"requested_unix_ms", absl::ToUnixMillis(r.requested)}};
        if (r.in_sync != absl::InfinitePast()) {
          entry["in_sync_unix_ms"] = absl::ToUnixMillis(r.in_sync);
          entry["seconds"] = absl::ToDoubleSeconds(r.in_sync - r.requested);
        }
        resyncs.push_back(std::move(entry));
      }
      summary["resyncs"] = std::move(resyncs);
    }
    nlohmann::json saves = nlohmann::json::array();
    double ratio_sum = 0;
    int ratios = 0;
    for (const SaveRecord& s : job.saves()) {
      nlohmann::json entry = {
          {"step", s.figures.step},
          {"checkpoint", s.figures.name},
          {"incremental", s.figures.incremental},
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
    if (job.evaluations() != nullptr) summary.update(job.evaluations()->ToJson());
    summary["workers_given_up"] = job.given_up();
    summary["workers_left_early"] = final_snap.left_early;
    summary.update({
        {"model", options.training.model()},
        {"global_step", eval.global_step},
        {"pushes", final_snap.pushes},
        {"examples", final_snap.examples},
        {"examples_per_sec", examples_per_sec},
        {"train_seconds", train_secs},
        {"wall_seconds", absl::ToDoubleSeconds(job.clock().Now() - job_start)},
        {"num_workers", cluster.worker.size()},
        {"num_ps", cluster.ps.size()},
    });
    PST_RETURN_IF_ERROR(WriteSummary(options.summary_json, summary));
    spdlog::info("wrote {}", options.summary_json);
  }
  return absl::OkStatus();
}

}  // namespace pst::chief
