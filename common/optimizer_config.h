// The optimizer settings of a job (proto::OptimizerConfig), checked where
// they are given (the flags, at start) and where they are used (the ps,
// which builds the optimizer: ps_server/store/optimizer.h), by the same rules.
//
// Thread-safety: pure functions.
#ifndef PST_COMMON_OPTIMIZER_CONFIG_H_
#define PST_COMMON_OPTIMIZER_CONFIG_H_

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// The accumulator start value Adagrad and FTRL use when the config's
// initial_accumulator is 0 (unset), as TensorFlow's default.
inline constexpr float kDefaultInitialAccumulator = 0.1f;

// `config` checked, with initial_accumulator 0 replaced by
// kDefaultInitialAccumulator for adagrad and ftrl. Known names: sgd,
// momentum, adam, adagrad, ftrl. Errors: InvalidArgument for an unknown
// name or a bad hyperparameter, the message naming the field: a learning
// rate that is not positive and finite, momentum or Adam betas outside
// [0, 1), an Adam epsilon that is not positive, a negative or non-finite
// initial accumulator, FTRL l1 or l2 below 0, an FTRL lr_power above 0.
absl::StatusOr<proto::OptimizerConfig> CheckOptimizerConfig(const proto::OptimizerConfig& config);

}  // namespace pst::common

#endif  // PST_COMMON_OPTIMIZER_CONFIG_H_
