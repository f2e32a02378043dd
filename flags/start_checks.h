// The checks a job's settings can be given before any process starts: they
// need only the flags and the cluster's shape (TF_CONFIG, or pstrain
// local's --ps, --workers, ...), read no data and reach no peer. `pstrain
// local` runs them for every task it is about to start; each daemon runs
// them at start-up (SetUpDaemon; the ps, CheckPsReplicas in job_flags.h) for the tasks it
// runs. So a bad setting is refused in one line before anything starts,
// instead of failing a daemon after the variables are created.
//
// What is checked, and for which task:
//   - the replica count (--ps_replicas) against the ps count: the
//     coordinator, and every ps;
//   - --replicas_to_aggregate against the worker count: the coordinator;
//   - the model's data: a model that reads --data has one, and the file
//     exists (pstrain local also takes "generate[:...]", which it writes
//     before starting anything): the coordinator and the C++ workers;
//   - the evaluation: an evaluator task has --checkpoint_dir, and
//     chief::CheckEvaluationOptions: the coordinator and the evaluator;
//   - the devices (--device=gpu with no GPU visible, a bad --gpu_memory):
//     the C++ workers.
// The mode and every flag's range are TrainingConfigFromFlags' checks,
// which run before these.
#ifndef PST_FLAGS_START_CHECKS_H_
#define PST_FLAGS_START_CHECKS_H_

#include "absl/status/status.h"
#include "common/tf_config.h"
#include "common/timing.h"
#include "proto/pstrain.pb.h"

namespace pst::flags {

struct StartCheck {
  // The cluster, and for a daemon its own task (tf.task).
  common::TfConfig tf;
  proto::TrainingConfig training;  // from TrainingConfigFromFlags
  common::Timing timing;           // from TimingFromFlags
  // pstrain local: every task of tf.cluster is checked, and --data may be
  // "generate[:...]". A daemon (false): only tf.task, and the coordinator
  // when tf.task is worker 0 of a cluster without a chief.
  bool whole_job = false;
  // Whether the workers are pstrain's C++ workers, which read --data and
  // the device flags (false under pstrain local --worker_command).
  bool cpp_workers = true;
};

// Runs the checks above; OK when every one passes. Errors:
// InvalidArgument, or FailedPrecondition for what this machine lacks (a
// GPU), with one line that names the flag and the fix where there is one,
// e.g. "--model=wide_deep needs --data: ...". Reads the flags that
// ChiefOptionsFromFlags and DeviceOptionsFromFlags read.
absl::Status CheckBeforeStart(const StartCheck& check);

}  // namespace pst::flags

#endif  // PST_FLAGS_START_CHECKS_H_
