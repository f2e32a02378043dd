// bfloat16, the wire dtype that halves a dense call's bytes
// (TrainingConfig.wire_dtype): float32's sign, its 8 exponent bits and the
// top 7 of its 23 mantissa bits, so the same range and about 3 significant
// decimal digits. Workers and ps convert at the edges of a call; the ps
// keeps float32 values and slots.
//
// Float to bf16 rounds to nearest, ties to even, as torch's and the
// hardware's conversions do, with two exceptions that keep a finite
// gradient finite and a bad one bad:
//  - a finite float that would round up past bf16's largest finite value
//    (3.3895e38; floats above 3.3961e38 would become Inf) saturates to it;
//  - a NaN stays a NaN (quiet, with its sign), never rounded into an Inf.
// Subnormals are kept as bf16 subnormals (rounded like any other value).
// bf16 to float is exact.
//
// Pure functions; thread-safe.
#ifndef PST_COMMON_BF16_H_
#define PST_COMMON_BF16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace pst::common {

inline constexpr uint16_t kBf16MaxFinite = 0x7f7f;

inline uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: quiet, sign kept
  }
  if ((bits & 0x7f800000u) == 0x7f800000u) return static_cast<uint16_t>(bits >> 16);  // Inf
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const uint16_t out = static_cast<uint16_t>(rounded >> 16);
  // A finite value never rounds into Inf: it saturates, keeping its sign.
  if ((out & 0x7f80u) == 0x7f80u) return static_cast<uint16_t>((out & 0x8000u) | kBf16MaxFinite);
  return out;
}

inline float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// values[i] into out[2i], out[2i+1] (little-endian bf16); any alignment.
// REQUIRES: out holds 2 * values.size() bytes.
void EncodeBf16(std::span<const float> values, char* out);
// The `out.size()` bf16 values at `in` (little-endian, any alignment) into
// `out`.
void DecodeBf16(const char* in, std::span<float> out);
// Whether any of the `count` bf16 values at `in` is NaN or Inf.
bool AnyNonFiniteBf16(const char* in, size_t count);

}  // namespace pst::common

#endif  // PST_COMMON_BF16_H_
