// What a ps accepts as a variable in a CreateVariables request: the spec
// (dtype, shape, routing and partition fields, admission) and the initial
// values the chief may send with it. Every check names the variable in an
// InvalidArgument error; nothing here changes state.
#ifndef PST_PS_SERVER_STORE_SPEC_CHECKS_H_
#define PST_PS_SERVER_STORE_SPEC_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"

namespace pst::ps {

// Everything about a spec a ps checks, beyond the initializer: a hash
// variable's [0, dim...] shape and admission, a MOD or DIV partition's
// rows, offset and stride (TensorFlow's layout), and no partition fields
// on a whole variable. `max_elements` bounds a variable's (or a hash row's)
// size.
absl::Status ValidateSpec(const proto::VariableSpec& spec, int64_t max_elements);

// Initial values the chief sent for a new variable: little-endian float32,
// exactly its elements, all finite; none for a hash variable.
absl::Status CheckInitialValues(const proto::VariableSpec& spec, const std::string& values);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_SPEC_CHECKS_H_
