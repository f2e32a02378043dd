// Deterministic variable initialization.
//
// Element k of a variable gets a value that depends only on (initializer,
// seed, k, shape), never on how the variable is partitioned, placed or on
// which process fills it: a counter-based generator (splitmix64 of the seed
// and the element's index) replaces a stateful RNG. Restoring onto another
// number of ps, or re-creating a lost partition, gives the same values.
#ifndef PST_COMMON_INITIALIZER_H_
#define PST_COMMON_INITIALIZER_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// Checks that an initializer is usable for `spec` (finite, positive scale,
// rank >= 2 for Glorot). InvalidArgument names the variable and the field.
absl::Status ValidateInitializer(const proto::VariableSpec& spec);

// Fills `out` with elements [first, first + out.size()) of `spec`.
// REQUIRES: ValidateInitializer(spec).ok().
void FillInitialValues(const proto::VariableSpec& spec, int64_t first, std::span<float> out);

// A uniform double in [0, 1) from (seed, counter); exposed for tests.
double CounterUniform(uint64_t seed, uint64_t counter);

}  // namespace pst::common

#endif  // PST_COMMON_INITIALIZER_H_
