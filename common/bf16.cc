#include "common/bf16.h"

namespace pst::common {

// Each loop loads and stores with memcpy (plain, possibly unaligned vector
// moves) and has no early exit, so that it vectorizes.

void EncodeBf16(std::span<const float> values, char* out) {
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t b = FloatToBf16(values[i]);
    std::memcpy(out + 2 * i, &b, sizeof(b));
  }
}

void DecodeBf16(const char* in, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, in + 2 * i, sizeof(b));
    out[i] = Bf16ToFloat(b);
  }
}

bool AnyNonFiniteBf16(const char* in, size_t count) {
  uint32_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    uint16_t b;
    std::memcpy(&b, in + 2 * i, sizeof(b));
    bad |= static_cast<uint32_t>((b & 0x7f80u) == 0x7f80u);
  }
  return bad != 0;
}

}  // namespace pst::common
