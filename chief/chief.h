// The chief's job driver: plan the placement, create the variables on every
// ps, serve the coordinator, watch progress and liveness, evaluate at the
// end, and tell every ps to exit.
#ifndef PST_CHIEF_CHIEF_H_
#define PST_CHIEF_CHIEF_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/progress.h"
#include "common/tf_config.h"
#include "common/timing.h"
#include "proto/pstrain.pb.h"
#include "rpc/grpc_channel.h"

namespace pst::chief {

struct ChiefOptions {
  common::TfConfig tf;  // the coordinator listens on tf.cluster.CoordinatorAddress()
  proto::TrainingConfig training;
  common::Timing timing;
  std::string data_dir;
  std::string summary_json;  // written at the end when non-empty
  // TensorBoard event files (common/event_writer.h) when non-empty: loss,
  // examples/s and staleness every summary_steps updates, and the test
  // metrics at the end.
  std::string summary_dir;
  int64_t summary_steps = 100;
  std::string bind;          // where the coordinator listens (--bind; see ListenAddress)
  // Prometheus (--metrics_port): the coordinator's figures and its server's
  // calls per method go here. Null: none. Must outlive RunChief.
  common::MetricsExporter* metrics = nullptr;
  // The coordinator's server and every channel to the ps (security,
  // limits, the BDP probe).
  rpc::RpcSettings rpc;
  // Checkpoints: saved under checkpoint_dir every save_steps updates and/or
  // save_secs seconds (0: never by that measure) and at the end; the newest
  // keep are kept. A job started with a checkpoint there resumes from it.
  std::string checkpoint_dir;
  int64_t save_steps = 0;
  double save_secs = 0;
  // Between full saves, incremental ones every incremental_save_steps
  // updates and/or incremental_save_secs seconds (0: never by that
  // measure): chains on the last full one (chief/checkpointing.h). Without
  // full saves by steps or seconds, the first save is full. The final save
  // is always full, so that it stands alone.
  int64_t incremental_save_steps = 0;
  double incremental_save_secs = 0;
  bool incremental() const { return incremental_save_steps > 0 || incremental_save_secs > 0; }
  // A restore of a checkpoint whose variables were saved with another
  // optimizer than they train with now: false, refused naming the
  // variable; true, their values restored and their slots afresh.
  bool reset_slots = false;
  // Chains kept (a full checkpoint and the incremental ones on it).
  int keep_checkpoints = 5;
  // Keras-style epochs (every worker through its shard N times): a
  // checkpoint every checkpoint_every_epochs, and an evaluation every
  // eval_every_epochs (0: never by that measure). With an evaluator task an
  // evaluation is a checkpoint it evaluates; without one the chief
  // evaluates the model the ps hold (built-in models only).
  int checkpoint_every_epochs = 0;
  int eval_every_epochs = 0;
  // How long the end of the job waits for the evaluators to report its
  // final checkpoint.
  absl::Duration evaluator_wait = absl::Minutes(5);
  // How progress is shown (--progress): kAuto is a live line when stderr is
  // a terminal, else a log line every timing.log_every.
  common::ProgressMode progress = common::ProgressMode::kAuto;
};

// The global step the job ends at when every worker goes through all its
// epochs of `num_examples` (sharded as data::ShardDataset does) or
// --max_steps stops it first; 0 when neither is known. Async and ssp apply
// every push, one per batch; sync applies one update a round and each
// worker pushes once a round, so the worker with the most batches sets it.
int64_t ExpectedFinalStep(const proto::TrainingConfig& training, int num_workers,
                          int64_t num_examples);

// Runs the job to the end. OK when every worker finished (or was given up
// on after --recovery_timeout_s of silence, as long as one finished) and the
// model was evaluated.
//
// Failures: a ps that restarts (a new incarnation) or stays unreachable for
// --peer_timeout_s is lost; the chief enters RECOVERING, waits up to
// --recovery_timeout_s for every ps to answer, restores all of them from the
// latest valid checkpoint (a consistent cut) in a new generation, and sends
// the workers back to their data positions in it. A restarted chief whose ps
// kept their state goes on without a restore.
//
// Errors: DeadlineExceeded when a ps or worker did not come up in time;
// Unavailable when a lost ps did not come back; DataLoss when a ps lost its
// state and there is no checkpoint; Cancelled when `stop` was stopped. In
// every case each ps is told to shut down before returning.
absl::Status RunChief(const ChiefOptions& options, const common::StopSignal& stop);

}  // namespace pst::chief

#endif  // PST_CHIEF_CHIEF_H_
