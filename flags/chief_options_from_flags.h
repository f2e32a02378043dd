// ChiefOptions from the command line, for the executables that run a
// coordinator: the chief, and worker 0 of a cluster without one.
#ifndef PST_FLAGS_CHIEF_OPTIONS_FROM_FLAGS_H_
#define PST_FLAGS_CHIEF_OPTIONS_FROM_FLAGS_H_

#include <algorithm>

#include "absl/flags/flag.h"
#include "chief/chief.h"
#include "flags/daemon_main.h"
#include "flags/job_flags.h"

namespace pst::flags {

inline chief::ChiefOptions ChiefOptionsFromFlags(const DaemonSetup& setup) {
  chief::ChiefOptions options;
  options.tf = setup.tf;
  options.training = setup.training;
  options.timing = setup.timing;
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.summary_json = absl::GetFlag(FLAGS_summary_json);
  options.summary_dir = absl::GetFlag(FLAGS_summary_dir);
  options.summary_steps = std::max<int64_t>(1, absl::GetFlag(FLAGS_summary_steps));
  options.bind = absl::GetFlag(FLAGS_bind);
  options.metrics = setup.metrics.get();
  options.rpc = setup.rpc;
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.save_steps = absl::GetFlag(FLAGS_save_checkpoints_steps);
  options.save_secs = absl::GetFlag(FLAGS_save_checkpoints_secs);
  options.incremental_save_steps =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_incremental_save_steps));
  options.incremental_save_secs = std::max(0.0, absl::GetFlag(FLAGS_incremental_save_secs));
  options.reset_slots = absl::GetFlag(FLAGS_reset_slots);
  options.keep_checkpoints = std::max(1, absl::GetFlag(FLAGS_keep_checkpoints));
  options.checkpoint_every_epochs = absl::GetFlag(FLAGS_checkpoint_every_epochs);
  options.eval_every_epochs = absl::GetFlag(FLAGS_eval_every_epochs);
  options.evaluator_wait = absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_evaluator_wait_s)));
  options.progress = absl::GetFlag(FLAGS_progress);
  return options;
}

}  // namespace pst::flags

#endif  // PST_FLAGS_CHIEF_OPTIONS_FROM_FLAGS_H_
