// A worker whose training loop runs outside pstrain's models: a Python
// process (python/) computes the gradients, and this session does the rest
// as the C++ worker (RunWorker) does: it registers, heartbeats, hands out
// the data positions to train, tags every push with its position, and
// follows failures: a step that fails on a ps is dropped, the session waits
// for the cluster (a restore, a restarted ps or chief) and hands out the
// batch to train next, rewound to the checkpoint's position when the ps
// were restored. Pushes are then applied exactly once, as the C++
// worker's.
//
// The loop it expects:
//   for (;;) {
//     Batch b = Next(num_examples);     // waits while the cluster recovers
//     if (b.done) break;
//     if (b.refresh) Pull(values);      // the values held are stale
//     ... rows: PullRows, compute, PushRows (once, every table) ...
//     PushPull(grads, values, ...);     // false: the step failed, dropped
//   }
// Calls after a failed one in the same step do nothing and return false.
//
// Where the steps went, as the C++ worker reports it (models::StepTimes),
// goes to the chief with the finish: a step runs from Next handing out its
// batch to its PushPull's answer; its communication is the time in its ps
// calls (all of it exposed: the caller waits for each), its compute the
// rest (the caller's data, forward and backward). Failed steps are not
// counted.
//
// Thread-compatible: one training thread calls it; heartbeats run on a
// thread of their own and need nothing of the caller.
#ifndef PST_WORKER_SESSION_H_
#define PST_WORKER_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "common/process.h"
#include "models/train_loop.h"
#include "proto/pstrain.pb.h"
#include "worker/cluster_link.h"
#include "worker/trainer.h"

namespace pst::worker {

class WorkerSession {
 public:
  // Over gRPC, to options.coordinator_address and the ps it lists.
  static absl::StatusOr<std::unique_ptr<WorkerSession>> Start(const TrainerOptions& options);
  // Over `connections` (not owned; they outlive the session).
  static absl::StatusOr<std::unique_ptr<WorkerSession>> Start(const TrainerOptions& options,
                                                              const WorkerConnections& connections);
  // Reports the worker gone unless it completed, and stops heartbeats.
  ~WorkerSession();

  const proto::ClusterState& state() const { return link_->state(); }
  const proto::TrainingConfig& training() const { return link_->training(); }
  int worker_index() const { return options_.worker_index; }
  client::PsClient& ps() { return *ps_; }
  int64_t global_step() const { return global_step_; }
  int64_t generation() const { return generation_; }

  struct Batch {
    bool done = false;     // the loop ends: finished, or told to stop
    int64_t position = 0;  // batches since the job began (over all epochs)
    int epoch = 0;
    // The values the caller holds are stale (first batch, or after a failed
    // step): Pull before computing.
    bool refresh = false;
    // The examples of the batch, as indices into the whole data set of
    // `num_examples`: this worker trains those with i % num_workers ==
    // worker_index, in a shuffled order that depends only on the job's
    // seed, the worker and the epoch (as the C++ worker's). With
    // `own_share`: indices into the epoch's order of this worker's own
    // share (a stream, which shuffles itself), first to last.
    std::vector<int64_t> examples;
  };
  // The next batch. Waits while the cluster recovers; reports this worker
  // done when its epochs (or --max_steps) are over and waits for the end of
  // the job, going on from a rewound position if the ps are restored
  // meanwhile. `num_examples` counts the whole data set, which the workers
  // share, or (own_share) this worker's own share of it, which it alone
  // reads (a stream's, data/stream_input.h). Errors: InvalidArgument for
  // num_examples < num_workers (own_share: < 1) or a size other than the
  // first call's; Unavailable when the cluster did not recover within
  // options.recovery_timeout or the coordinator was lost; Cancelled after
  // Stop().
  absl::StatusOr<Batch> Next(int64_t num_examples, bool own_share = false);

  // The ps calls of the current batch, into and from caller memory. Each
  // returns false when the step failed on a ps in a way worth retrying (then
  // Next waits and hands the batch out again), and an error for anything
  // else (a wrong size, an unknown table: nothing is sent).
  absl::StatusOr<bool> Pull(const client::ValueSpans& values);
  // Pushes the batch's dense gradients tagged with its position (SYNC: with
  // the version they were computed from), and fetches the values after it.
  // `examples` and `loss` go into the progress the chief shows.
  absl::StatusOr<bool> PushPull(const client::GradientSpans& grads,
                                const client::ValueSpans& values, int64_t examples, float loss);
  absl::StatusOr<bool> PullRows(const std::string& table, std::span<const int64_t> ids,
                                std::span<float> rows);
  // Adds gradient rows of one or more tables in one push tagged with the
  // batch's position: grads[k] is [tables[k].ids.size(), dim]. A ps applies
  // a worker's row push of a position once and drops any other as a retry,
  // so a batch pushes its rows once, every table in the same call; a
  // second call in the same batch is refused with FailedPrecondition and
  // sends nothing. Errors: also NotFound for an unknown table,
  // InvalidArgument for a bad id or size (nothing sent).
  absl::StatusOr<bool> PushRows(std::span<const client::PsClient::TableIds> tables,
                                const client::GradientSpans& grads);
  absl::StatusOr<bool> PushRows(const std::string& table, std::span<const int64_t> ids,
                                std::span<const float> grads);

  // Ends the loop early (SIGTERM, a user's break): Next returns Cancelled.
  void Stop(const std::string& reason) { stop_.Stop(reason); }

 private:
  WorkerSession(const TrainerOptions& options, std::unique_ptr<client::CoordinatorClient> owned)
      : options_(options), owned_coordinator_(std::move(owned)) {}
  absl::Status Connect(const WorkerConnections& connections);
  // A step failed (or the coordinator recovers): wait as RunWorker does.
  // Returns true when the loop should end (stopped, or told to stop).
  absl::StatusOr<bool> WaitForCluster();
  // The epochs are over: report done and wait for the end. Returns true
  // when the job ended; false when the ps were restored meanwhile.
  absl::StatusOr<bool> Finish();
  // Adds the time of a ps call of the current step, from `start` to now.
  void NoteCall(absl::Time start) { step_calls_ += absl::Now() - start; }
  // Records a ps call's failure: false for one worth retrying.
  absl::StatusOr<bool> Failed(const absl::Status& status, const char* what);
  bool Recovering(const CoordinatorView::State& v) const {
    return v.generation != generation_ || v.phase == proto::PHASE_RECOVERING;
  }

  const TrainerOptions options_;
  std::unique_ptr<client::CoordinatorClient> owned_coordinator_;
  common::StopSignal stop_;
  std::unique_ptr<ClusterLink> link_;
  std::unique_ptr<client::PsClient> ps_;
  int64_t generation_ = 0;
  int64_t global_step_ = 0;
  int64_t position_ = 0;      // of the batch handed out last (or to hand out)
  bool handed_out_ = false;   // position_ was handed out and not yet passed
  bool step_failed_ = false;  // the batch at position_ failed
  bool rows_pushed_ = false;  // the batch handed out last pushed its rows
  bool refresh_ = true;
  bool completed_ = false;
  int epoch_ = 0;
  int64_t num_examples_ = 0;
  uint64_t shuffle_seed_ = 0;
  int order_epoch_ = -1;
  std::vector<int64_t> order_;  // of order_epoch_
  std::optional<absl::Time> failing_since_;
  absl::Duration backoff_ = absl::Milliseconds(100);
  // The steps' times (see the top), and the current step's: when its batch
  // was handed out, and its ps calls so far.
  models::StepTimes times_;
  absl::Time step_start_;
  absl::Duration step_calls_;
};

}  // namespace pst::worker

#endif  // PST_WORKER_SESSION_H_
