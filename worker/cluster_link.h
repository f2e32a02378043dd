// A worker's link to the rest of the cluster, whoever runs its training
// loop (RunWorker's models, or a Python process through WorkerSession):
// registration with the coordinator, the heartbeat thread that carries
// progress out and brings the coordinator's phase, generation and "should
// stop" back, and the report of the end.
#ifndef PST_WORKER_CLUSTER_LINK_H_
#define PST_WORKER_CLUSTER_LINK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "client/shard_routes.h"
#include "common/process.h"
#include "models/train_loop.h"
#include "proto/pstrain.pb.h"
#include "worker/trainer.h"

namespace pst::worker {

// Progress shared between the training loop and the heartbeat thread.
class Progress {
 public:
  // A new attempt: training in `generation` from data position `position`.
  // Leaving another generation (a restore) is reported from then on with
  // the position this worker had reached in it (HeartbeatRequest.left).
  void Begin(int64_t generation, int64_t position);
  void Step(int64_t examples, float loss, int epoch, int64_t version, int64_t position);
  // Waiting at the end of epoch `epoch` for the chief (0: not waiting).
  void SetWaitingAtEpochEnd(int epoch);
  int waiting_at_epoch_end() const;
  int64_t position() const;
  int64_t steps() const;
  // Fills `request` and resets the running loss.
  void Report(proto::HeartbeatRequest* request);

 private:
  mutable absl::Mutex mu_;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t examples_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int loss_count_ ABSL_GUARDED_BY(mu_) = 0;
  int epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t position_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool begun_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_at_epoch_end_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<proto::LeftGeneration> left_ ABSL_GUARDED_BY(mu_);
};

// What the coordinator last said, from heartbeats and registrations.
class CoordinatorView {
 public:
  struct State {
    proto::Phase phase = proto::PHASE_RUNNING;
    int64_t generation = 0;
    int64_t position = 0;  // where to go on from in `generation`
    bool should_stop = false;
    int epochs_released = 0;  // see HeartbeatResponse.epochs_released
    uint64_t updates = 0;     // bumped by every answer
  };
  void Update(proto::Phase phase, int64_t generation, int64_t position, bool should_stop,
              int epochs_released);
  State Get() const;
  // Waits until the coordinator answers again after `seen`, or `timeout`.
  State WaitForUpdate(uint64_t seen, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_);
};

// Whether a failed step is worth retrying: the ps or the coordinator is
// away, restarting or restoring (as opposed to bad input).
bool Retryable(const absl::Status& status);

// Makes one call to the coordinator (`call`, given a 1 s timeout) until it
// is answered with anything but UNAVAILABLE or DEADLINE_EXCEEDED (the
// coordinator is not up yet, or is initializing or recovering), backing off
// up to 1 s between tries, until `deadline`. The errors say "stopped before
// <stopped_before>" and "the coordinator at <address> did not answer<what>
// in time".
absl::Status CallCoordinatorUntil(const std::function<absl::Status(absl::Duration)>& call,
                                  const std::string& address, absl::Time deadline,
                                  const common::StopSignal& stop, absl::string_view stopped_before,
                                  absl::string_view what);

class ClusterLink {
 public:
  // Registers as options.worker_index, retrying while the coordinator is not
  // up (or initializes or recovers) until options.startup_timeout. A
  // restarted worker starts where the ps last took its pushes, when that is
  // beyond what the coordinator knows. Heartbeats start with Start().
  static absl::StatusOr<std::unique_ptr<ClusterLink>> Register(
      const TrainerOptions& options, const WorkerConnections& connections,
      const common::StopSignal& stop);
  // Stops the heartbeats (see StopHeartbeats).
  ~ClusterLink();

  const proto::ClusterState& state() const { return registered_.state(); }
  // Where each shard's primary is (replicated jobs), as the coordinator last
  // said: a transport made with MakeRoutedTransport over these follows a
  // failover.
  std::shared_ptr<client::ShardRoutes> routes() const { return routes_; }
  const proto::TrainingConfig& training() const { return registered_.state().training(); }
  std::vector<std::string> ps_addresses() const;
  // Where this worker starts in its data.
  int64_t start_position() const { return start_; }

  // Starts heartbeats from start_position(). Without an answer for
  // options.recovery_timeout, lost() stops and heartbeat_error() says why.
  void Start();
  // Joins the heartbeat thread (idempotent).
  void StopHeartbeats();

  Progress& progress() { return progress_; }
  CoordinatorView& view() { return view_; }
  const common::StopSignal& lost() const { return lost_coordinator_; }
  // Why heartbeats gave up; OK while they go on. Read after StopHeartbeats.
  const absl::Status& heartbeat_error() const { return heartbeat_error_; }
  // This worker finished its share and waits for the end: said again to a
  // restarted coordinator.
  void set_finished(bool finished) { finished_ = finished; }

  // After a failed step, or while the coordinator recovers: waits until
  // the coordinator is out of recovery with a generation other than
  // `generation` (the ps were restored) or, outside recovery, until
  // `retry_at` or a shard moves (routes() changes: a failover). Ends early on a stop, a lost
  // coordinator, should_stop, or once `failing_since` is recovery_timeout ago. `v` is the view the
  // caller last read; returns the view it ended on.
  CoordinatorView::State AwaitCluster(CoordinatorView::State v, int64_t generation,
                                      absl::Time failing_since, absl::Time retry_at);
  // The epoch whose end the chief acts on (ClusterState's
  // checkpoint_every_epochs, eval_every_epochs) that data position
  // `position` closes, when the chief has not released it yet: this worker
  // holds there (AwaitEpochRelease). 0: none. `per_epoch`: this worker's
  // batches in an epoch.
  int EpochEndToHold(int64_t position, int64_t per_epoch) const;
  // Holds at the end of epoch `epoch`: heartbeats at once and then often,
  // saying so, until the chief releases it, a restore begins (a generation
  // other than `generation`, or PHASE_RECOVERING), should_stop, a stop or a
  // lost coordinator. Returns the view it ended on.
  CoordinatorView::State AwaitEpochRelease(int epoch, CoordinatorView::State v,
                                           int64_t generation);

  // After ReportDone(true): waits, heartbeating, until the chief ends the
  // job (PHASE_DONE), a restore begins (a generation other than
  // `generation`, or PHASE_RECOVERING), a stop or a lost coordinator.
  // Returns the view it ended on.
  CoordinatorView::State AwaitEnd(CoordinatorView::State v, int64_t generation);

  // Reports the end of this worker: `completed` (finished its share; the
  // coordinator refuses one from an old generation), or leaving early for
  // `reason`. With `times`, where its steps went (the chief's summary
  // shows the slowest worker's).
  absl::Status ReportDone(bool completed, const std::string& reason,
                          const proto::StepTimes* times = nullptr);

 private:
  ClusterLink(const TrainerOptions& options, const WorkerConnections& connections,
              const common::StopSignal& stop)
      : options_(options), connections_(connections), stop_(stop) {}
  void HeartbeatLoop();
  // Waits for the next heartbeat's time (sooner while holding at an
  // epoch's end, or when BeatNow asks); false once heartbeats stop.
  bool AwaitBeat();
  void BeatNow();

  const TrainerOptions options_;
  const WorkerConnections connections_;
  const common::StopSignal& stop_;
  proto::RegisterResponse registered_;
  int64_t start_ = 0;
  std::shared_ptr<client::ShardRoutes> routes_;
  Progress progress_;
  CoordinatorView view_;
  common::StopSignal lost_coordinator_;
  absl::Notification loop_done_;
  absl::Mutex beat_mu_;
  bool beats_stopped_ ABSL_GUARDED_BY(beat_mu_) = false;
  bool beat_now_ ABSL_GUARDED_BY(beat_mu_) = false;
  std::atomic<bool> finished_{false};
  absl::Status heartbeat_error_;
  std::thread heartbeat_;
};

// A worker's step times and the dense bytes its client moved, as its
// finish reports them to the chief (ReportDone, WorkerDoneRequest.step_times).
proto::StepTimes StepTimesProto(const models::StepTimes& times,
                                const client::PsClient::WireBytes& wire);

}  // namespace pst::worker

#endif  // PST_WORKER_CLUSTER_LINK_H_
