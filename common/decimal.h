// Hyperparameters travel as float32 (proto::OptimizerConfig), but users
// write them as decimals and torch computes with them as doubles: 1 - 0.9
// in double is 0.1, while 1 - 0.9f is 0.100000024. DecimalValue gives back
// the decimal a float was written as, so the ps's coefficients are the
// ones torch and TensorFlow compute.
//
// Thread-safety: pure functions.
#ifndef PST_COMMON_DECIMAL_H_
#define PST_COMMON_DECIMAL_H_

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace pst::common {

// The shortest decimal that rounds to `f`, as a double (0.9f -> 0.9).
// Non-finite values come back as they are.
inline double DecimalValue(float f) {
  if (!std::isfinite(f)) return f;
  char text[64];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text) - 1, f);
  *end.ptr = '\0';
  return std::strtod(text, nullptr);
}

}  // namespace pst::common

#endif  // PST_COMMON_DECIMAL_H_
