// The job's optimizer from the flags, for TrainingConfigFromFlags.
#ifndef PST_FLAGS_OPTIMIZER_FLAGS_H_
#define PST_FLAGS_OPTIMIZER_FLAGS_H_

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"

namespace pst::models {
class Model;
}  // namespace pst::models

namespace pst::flags {

// Fills config->optimizer and config->clip_norm. A model spec's optimizer
// (config->optimizer set by the spec's ReadFiles) stands unless --optimizer
// names one; then every optimizer flag builds it, the model's optimizer and
// rate where --optimizer and --learning_rate are empty. Over either:
// --learning_rate, --lr_schedule, --clip_value and --skip_nonfinite when
// given, and --clip_norm. Errors: InvalidArgument naming the flag or the
// field (common::CheckOptimizerConfig's rules).
absl::Status OptimizerFromFlags(const models::Model& model, proto::TrainingConfig* config);

}  // namespace pst::flags

#endif  // PST_FLAGS_OPTIMIZER_FLAGS_H_
