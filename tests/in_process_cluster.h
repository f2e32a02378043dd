// A whole cluster in one test process: P in-process ps (ps_server/
// in_process_ps.h), the chief's Job (chief/job.h) over InProcessPsControl
// and a Coordinator, and W workers running the real worker loop
// (worker::RunWorker) over InProcessCoordinatorClient and the in-process
// data transport. No sockets, no sleeps in the test: every moment a test
// needs is chosen by it.
//  - The chief's time is a ManualClock: the chief waits for nothing until
//    the test lets one of its waits (a heartbeat interval, mostly) pass with
//    Tick(), so every probe, save, recovery and the end of the job happen
//    at a tick the test chose.
//  - The workers run freely (real threads, real heartbeats every few ms),
//    but a Gate holds each worker's pushes from a data position the test
//    chooses, can lose the answer of one push, and can cut a worker off.
//  - The ps can be restarted (a new incarnation, no variables) or taken down
//    from the test or from an interceptor on the chief's control calls,
//    e.g. in the middle of a save.
//  - The chief can crash (its calls reach no one, its coordinator goes) and
//    a new one start over the same ps; a worker can crash and restart.
//
// The model is a small MLP on a synthetic Fashion-MNIST-shaped dataset
// written to a temporary directory, so a job runs in well under a second
// (or logreg, whose hash table's row pushes the gate holds as it holds the
// dense pushes: see Config::model).
#ifndef PST_TESTS_IN_PROCESS_CLUSTER_H_
#define PST_TESTS_IN_PROCESS_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "chief/chief.h"
#include "chief/coordinator.h"
#include "chief/in_process_coordinator_client.h"
#include "chief/job.h"
#include "client/ps_client.h"
#include "common/clock.h"
#include "common/process.h"
#include "proto/pstrain.pb.h"
#include "ps_server/in_process_control.h"
#include "ps_server/in_process_ps.h"
#include "ps_server/in_process_transport.h"

namespace pst::testing {

// The chief's clock: time stands still until the test lets one of the
// chief's waits pass, which moves time on by that wait's length. Starts far
// from the real time, so that anything comparing it with absl::Now() (the
// coordinator's wait for workers to hear the end) finds every worker long
// silent and does not wait. Thread-safe.
class ManualClock final : public common::Clock {
 public:
  ManualClock();

  absl::Time Now() override;
  // Blocks until Tick lets this wait pass (or RunFree).
  bool WaitFor(absl::Duration timeout, const common::StopSignal& stop) override;

  // Lets one wait pass and returns when the chief waits again or has
  // finished; false if that took longer than `limit` (a chief stuck
  // elsewhere).
  bool Tick(absl::Duration limit = absl::Seconds(30));
  // Waits until the chief waits on this clock or has finished.
  bool AwaitWaiting(absl::Duration limit = absl::Seconds(30));
  // From now on every wait passes at once (a chief being torn down).
  void RunFree();
  // The chief's run has ended: Tick and AwaitWaiting return at once.
  void Finish();
  // A new chief starts: waits block again.
  void Restart();

 private:
  bool ReadyLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return finished_ || entered_ > allowed_;
  }

  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int64_t entered_ ABSL_GUARDED_BY(mu_) = 0;  // waits begun
  int64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;  // waits let pass
  bool free_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// Holds each worker's pushes from a chosen data position on, loses answers,
// and cuts workers off. Thread-safe.
class Gate {
 public:
  explicit Gate(int num_workers);

  // Pushes of `worker` for batches at data position >= `position` wait.
  void HoldAt(int worker, int64_t position);
  void Release(int worker) { HoldAt(worker, INT64_MAX); }
  // Waits until a push of `worker` for `position` waits at the gate.
  bool AwaitHeld(int worker, int64_t position, absl::Duration limit = absl::Seconds(30));
  // Every push of `worker`, waiting or to come, fails Unavailable until
  // Mend: the worker's process is gone.
  void Cut(int worker);
  void Mend(int worker);
  // The push of `worker` for `position` reaches each ps, but its answer is
  // lost, once per ps: the worker sees Unavailable.
  void LoseAnswer(int worker, int64_t position);

  // The data position of the first push `worker` made (sent to the gate,
  // held or not) in `generation` (-1: none yet).
  int64_t FirstPosition(int worker, int64_t generation) const;
  // The data position of the first push of `worker`'s `incarnation`.
  int64_t FirstPositionOf(int worker, uint64_t incarnation) const;

  // For the transport: waits while `push` is held. Errors: Unavailable
  // while the worker is cut off.
  absl::Status Pass(int ps, const proto::PushRequest& push);
  // For the transport: waits while a row push is held (SYNC: its step is
  // taken for the data position). Errors: as Pass.
  absl::Status PassRows(int ps, const proto::PushRowsRequest& push);
  // For the transport: whether this answer is to be lost.
  bool TakeLostAnswer(int ps, const proto::PushRequest& push);

 private:
  mutable absl::Mutex mu_;
  std::vector<int64_t> hold_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> held_ ABSL_GUARDED_BY(mu_);  // position waiting, or -1
  std::vector<bool> cut_ ABSL_GUARDED_BY(mu_);
  // (worker, position) -> the ps whose answer was lost already.
  std::map<std::pair<int, int64_t>, std::vector<bool>> lose_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, int64_t>, int64_t> first_in_generation_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, uint64_t>, int64_t> first_of_incarnation_ ABSL_GUARDED_BY(mu_);
};

class InProcessCluster {
 public:
  struct Config {
    int num_ps = 2;
    int num_workers = 2;
    proto::SyncMode mode = proto::SYNC;
    int train_examples = 32;  // over all workers
    int batch_size = 4;
    int epochs = 2;
    int64_t save_steps = 0;              // 0: only the final checkpoint
    int64_t incremental_save_steps = 0;  // --incremental_save_steps
    int ps_replicas = 1;                 // 2: a backup of every shard (--ps_replicas)
    // "mlp", or "logreg": a hash table (--buckets=0) and a bias, trained on
    // generated libsvm lines; its parameters are the bias, then the table's
    // rows of every id of the data.
    std::string model = "mlp";
  };

  explicit InProcessCluster(Config config);
  // Stops whatever still runs, in an order that lets everything end.
  ~InProcessCluster();

  const Config& config() const { return config_; }
  // The global step the job ends at.
  int64_t final_step() const;

  // Starts the chief's job and waits until it has set up the ps (Start)
  // and waits for its first tick.
  void StartChief();
  // Starts worker `index` as a new incarnation.
  void StartWorker(int index);
  void StartWorkers();

  // The chief crashes: its calls reach no ps, the workers reach no
  // coordinator, and its job ends without telling anyone. Returns what its
  // Run returned.
  absl::Status CrashChief();
  // Worker `index` crashes: it reaches nothing any more and its loop ends.
  // Returns what its RunWorker returned.
  absl::Status CrashWorker(int index);

  // Holds every worker at `position`, waits until each waits there and its
  // heartbeats say so, and ticks twice: one probe of the ps moves the
  // coordinator's version ceiling, the next acts on it (a save is due then).
  void SettleAt(int64_t position);
  void ReleaseAll();
  // Waits until `done` holds, rechecking it as heartbeats arrive.
  bool Await(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(30));
  // Waits until every worker has finished, then ticks until the job ends;
  // returns what Run returned (Unknown if it did not end).
  absl::Status FinishJob();

  ManualClock& clock() { return clock_; }
  Gate& gate() { return gate_; }
  ps::InProcessPs& ps() { return *ps_; }
  chief::Job& job() { return *job_; }
  chief::Coordinator& coordinator() { return *coordinator_; }
  ps::InProcessPsControl& chief_control() { return *control_; }
  chief::Coordinator::Snapshot Check() { return coordinator_->Check(clock_.Now()); }
  uint64_t incarnation(int worker) const { return incarnations_[worker]; }
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }
  const std::string& summary_json() const { return summary_json_; }

  // The parameters every evaluation of the chief found, in order.
  std::vector<client::Values> evaluated() const;
  // The ps's Health, as the chief sees it.
  proto::HealthResponse Health(int ps);
  // The manifest of checkpoint `step`, if there is one that passes its
  // checks.
  std::optional<proto::CheckpointManifest> Checkpoint(int64_t step) const;

  // The parameters a fault-free run of `config` ends with.
  static client::Values FaultFreeParameters(const Config& config);

 private:
  class ObservedClient;

  absl::StatusOr<chief::EvalResult> Evaluate(const proto::ClusterState& state);
  void Observe();

  const Config config_;
  std::string dir_, data_dir_, checkpoint_dir_, summary_json_;
  std::vector<int64_t> table_ids_;  // logreg: the ids of its data
  chief::ChiefOptions options_;
  ManualClock clock_;
  Gate gate_;
  std::shared_ptr<ps::InProcessPs> ps_;
  std::shared_ptr<ps::InProcessPsTransport> transport_;

  // The chief, as it is now.
  std::unique_ptr<chief::JobPlan> plan_;
  std::unique_ptr<chief::Coordinator> coordinator_;
  std::unique_ptr<ps::InProcessPsControl> control_;
  std::unique_ptr<chief::Job> job_;
  std::unique_ptr<common::StopSignal> chief_stop_;
  std::thread chief_thread_;
  std::shared_ptr<absl::Notification> chief_done_;  // its Run returned
  absl::Status chief_status_;
  // Crashed chiefs: kept until the end, as the threads that used them.
  std::vector<std::unique_ptr<chief::Coordinator>> old_coordinators_;
  std::vector<std::unique_ptr<ps::InProcessPsControl>> old_controls_;
  std::vector<std::unique_ptr<chief::JobPlan>> old_plans_;
  std::vector<std::unique_ptr<chief::Job>> old_jobs_;

  // The workers, by index: the incarnation running now.
  std::vector<std::unique_ptr<ObservedClient>> clients_;
  std::vector<std::unique_ptr<common::StopSignal>> worker_stops_;
  std::vector<std::thread> worker_threads_;
  std::vector<absl::Status> worker_status_;
  std::vector<uint64_t> incarnations_;

  mutable absl::Mutex mu_;
  uint64_t calls_ ABSL_GUARDED_BY(mu_) = 0;  // coordinator calls so far
  std::vector<client::Values> evaluated_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pst::testing

#endif  // PST_TESTS_IN_PROCESS_CLUSTER_H_
