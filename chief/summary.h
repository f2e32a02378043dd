// What the chief reports about a job: the Prometheus metrics it serves
// (--metrics_port), the TensorBoard scalars it writes (--summary_dir), the
// records of its saves and recoveries, and at the end the log lines and the
// summary JSON (--summary_json).
//
// Thread-safety: ChiefMetrics is safe for concurrent use; the rest is
// thread-compatible (the job's thread).
#ifndef PST_CHIEF_SUMMARY_H_
#define PST_CHIEF_SUMMARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "chief/checkpointing.h"
#include "chief/chief.h"
#include "chief/coordinator.h"
#include "chief/replica_view.h"
#include "common/event_writer.h"
#include "common/metrics.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace pst::chief {

class Job;

// The model's quality on held-out data, as the evaluation found it.
struct EvalResult {
  nlohmann::json metrics;   // test_accuracy/test_loss, or test_auc/test_logloss
  std::string line;         // for the log
  int64_t global_step = 0;  // updates applied to the dense variables
};

// One recovery from a lost ps, for the log and the summary.
struct RecoveryRecord {
  std::string cause;
  absl::Time detected;
  absl::Time resumed;
  // The global step the job had reached before the loss: the highest
  // version of the dense variables any worker saw (as the workers report
  // it once they follow the restore).
  int64_t step_before = 0;
  int64_t restored_step = 0;
  int64_t generation = 0;  // the restore's
  // By worker: the batches it trains again, from its position in the
  // checkpoint to the one it had reached (Coordinator::StepsRedone).
  std::vector<int64_t> steps_redone;
  // Every worker still training has reported its own figure (until then the
  // figures come from the workers' last heartbeats before the loss: lower
  // bounds).
  bool redone_reported = false;
  int64_t steps_redone_total() const;
};

// One failover of a replicated job: a lost ps whose shards' backups were
// promoted (no restore, no rewind), for the log and the summary.
struct FailoverRecord {
  std::string cause;
  int lost_ps = 0;
  std::vector<int> shards;       // the shards whose primary it was
  std::vector<int> promoted_to;  // the ps now serving each
  absl::Time detected;
  absl::Time promoted;
  // When each promoted shard applied its first change as primary
  // (InfinitePast: none yet).
  std::vector<absl::Time> first_change;
  int64_t step_before = 0;  // global step when the loss was detected
  int64_t step_after = 0;   // ... once promoted (never lower: no rewind)
};

// One backup sent its shard whole (a resync) while training went on: onto a
// ps that came back after a failover, or to a backup that fell out of sync.
struct ResyncRecord {
  int shard = 0;
  int primary = 0;
  int backup = 0;
  absl::Time requested;
  absl::Time in_sync = absl::InfinitePast();  // when the chief saw it in sync
};

// One periodic save, with the training throughput during it and between
// saves (pushes applied per second on the busiest ps).
struct SaveRecord {
  SaveFigures figures;
  double pushes_per_sec_during = 0;
  double pushes_per_sec_between = -1;  // -1: not measured (the first save)
};

// The chief's Prometheus metrics (--metrics_port): the coordinator's view,
// read at every scrape while the job runs, and the events Job records.
class ChiefMetrics {
 public:
  // `optimizer`: the job's, for the learning rate at the global step.
  ChiefMetrics(common::MetricsExporter* exporter, const Coordinator* coordinator,
               proto::OptimizerConfig optimizer);
  ~ChiefMetrics();

  void Saved(double seconds) { save_seconds_->Observe(seconds); }
  void Recovered() { recoveries_->Increment(); }
  // Worker `worker` has trained `steps` batches again after restores, in
  // all (pstrain_chief_steps_redone_total{worker}).
  void StepsRedone(int worker, int64_t steps);
  void FailedOver() { failovers_->Increment(); }
  // Replicated jobs: exports each shard's copies (gauge
  // pstrain_chief_backup_in_sync{shard, primary, backup}), read at every
  // scrape from `view`, which must outlive this.
  void WatchReplicas(const ReplicaView* view);

 private:
  common::MetricsExporter* exporter_;
  int refresher_ = -1;
  int replica_refresher_ = -1;
  std::vector<std::pair<int, prometheus::Gauge*>> phases_;
  prometheus::Gauge* global_step_;
  prometheus::Gauge* live_workers_;
  prometheus::Gauge* done_workers_;
  prometheus::Gauge* generation_;
  prometheus::Gauge* learning_rate_;
  prometheus::Counter* examples_;
  prometheus::Counter* recoveries_;
  prometheus::Family<prometheus::Counter>* steps_redone_;
  prometheus::Counter* failovers_;
  prometheus::Histogram* save_seconds_;
};

// TensorBoard scalars (--summary_dir): loss, examples/s and the staleness of
// the gradients applied since the last ones, every summary_steps updates,
// and the test metrics at the end. Does nothing until opened.
class TrainingEvents {
 public:
  // Opens the event file under `dir` (a failure is logged, not fatal: the
  // job goes on without summaries).
  void Open(const std::string& dir);
  bool open() const { return events_ != nullptr; }
  // The global step of the last scalars written.
  int64_t last_step() const { return summary_step_; }

  // `applied` and `staleness_sum`: the busiest ps's applied gradients and
  // their summed staleness, at the last probe; `learning_rate`: the rate at
  // the snapshot's global step.
  void Write(const Coordinator::Snapshot& snap, absl::Time now, int64_t applied,
             int64_t staleness_sum, double learning_rate);
  // The test metrics at the step they were measured.
  void WriteFinal(const nlohmann::json& metrics, int64_t step);
  // An evaluation during training (--eval_every_epochs), as eval/<metric>.
  void WriteEval(const nlohmann::json& metrics, int64_t step);

 private:
  void WriteMetrics(const nlohmann::json& metrics, int64_t step, absl::string_view prefix);

  std::unique_ptr<common::EventWriter> events_;
  int64_t summary_step_ = 0;
  absl::Time summary_time_;
  int64_t summary_examples_ = 0;
  int64_t summary_applied_ = 0;
  int64_t summary_staleness_sum_ = 0;
};

// Writes `summary` to `path` through a temporary file and a rename.
absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary);

// The end of a job that went well, evaluated as `eval` when the workers had
// finished as `final_snap`: the final scalars, the "done" line, the
// training-mode figures every ps reports, and --summary_json.
absl::Status ReportJob(Job& job, const ChiefOptions& options, const proto::ClusterState& initial,
                       const EvalResult& eval, const Coordinator::Snapshot& final_snap,
                       absl::Time job_start);

}  // namespace pst::chief

#endif  // PST_CHIEF_SUMMARY_H_
