#include "common/bf16.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace pst::common {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t BitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

TEST(Bf16Test, RepresentableValues_RoundTripExactly) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = Bf16ToFloat(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBf16(f), h) << std::hex << b;
  }
}

TEST(Bf16Test, RoundsToNearestTiesToEven) {
  // 1.0 is 0x3f800000; the bf16 step there is 0x10000 in float bits.
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fff)), 0x3f80);  // below half: down
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000)), 0x3f80);  // tie, even below: down
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001)), 0x3f81);  // above half: up
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000)), 0x3f82);  // tie, odd below: up to even
  EXPECT_EQ(FloatToBf16(FromBits(0xbf818000)), 0xbf82);  // the same, negative
  // A carry out of the mantissa moves the exponent: 1.9999 -> 2.
  EXPECT_EQ(FloatToBf16(FromBits(0x3fffffff)), 0x4000);
}

TEST(Bf16Test, NearestOfTwoNeighbours_OnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    const float f = FromBits(bits(rng));
    if (!std::isfinite(f) || std::fabs(f) > 3.3e38f) continue;
    const uint16_t h = FloatToBf16(f);
    const uint16_t down = static_cast<uint16_t>(BitsOf(f) >> 16);
    const double error = std::fabs(static_cast<double>(Bf16ToFloat(h)) - f);
    // No bf16 value is nearer than the one chosen.
    for (uint16_t other : {down, static_cast<uint16_t>(down + 1)}) {
      EXPECT_LE(error, std::fabs(static_cast<double>(Bf16ToFloat(other)) - f)) << f;
    }
  }
}

TEST(Bf16Test, NanStaysNan_InfStaysInf_FiniteNeverBecomesInf) {
  // Signalling and quiet NaNs, either sign, a payload only in the low bits
  // (which truncation alone would turn into Inf).
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t h = FloatToBf16(FromBits(nan));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(h))) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31);
  }
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // Past bf16's largest finite value: saturated, not Inf.
  EXPECT_EQ(FloatToBf16(FLT_MAX), kBf16MaxFinite);
  EXPECT_EQ(FloatToBf16(-FLT_MAX), 0x8000 | kBf16MaxFinite);
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f8000)), kBf16MaxFinite);  // the tie above it
  EXPECT_TRUE(std::isfinite(Bf16ToFloat(kBf16MaxFinite)));
}

TEST(Bf16Test, Subnormals_KeptAndRounded) {
  // The smallest bf16 subnormal is float bits 0x00010000.
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000)), 0x0001);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000)), 0x0000);  // tie, to even 0
  EXPECT_EQ(FloatToBf16(FromBits(0x00008001)), 0x0001);
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000)), 0x0002);  // tie, odd: up
  EXPECT_EQ(FloatToBf16(FromBits(0x80008001)), 0x8001);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(FloatToBf16(FromBits(0x007fffff)), 0x0080);
  EXPECT_GT(Bf16ToFloat(0x0001), 0.0f);
  EXPECT_LT(Bf16ToFloat(0x0001), FLT_MIN);
}

TEST(Bf16Test, Buffers_OddLengthsAndUnalignedBytes_MatchTheScalarConversions) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 100);
  for (size_t n : {0u, 1u, 3u, 7u, 8u, 15u, 16u, 17u, 1001u}) {
    std::vector<float> values(n);
    for (float& v : values) v = g(rng);
    if (n > 2) values[1] = std::numeric_limits<float>::quiet_NaN();
    std::vector<char> bytes(2 * n + 1);
    char* out = bytes.data() + 1;  // odd address
    EncodeBf16(values, out);
    std::vector<float> back(n);
    DecodeBf16(out, back);
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, out + 2 * i, 2);
      EXPECT_EQ(h, FloatToBf16(values[i])) << n << " " << i;
      EXPECT_EQ(BitsOf(back[i]), BitsOf(Bf16ToFloat(h)));
    }
    EXPECT_EQ(AnyNonFiniteBf16(out, n), n > 2) << n;
  }
  const uint16_t inf = 0xff80;
  std::vector<uint16_t> finite(5, 0x3f80);
  EXPECT_FALSE(AnyNonFiniteBf16(reinterpret_cast<const char*>(finite.data()), 5));
  finite[4] = inf;
  EXPECT_TRUE(AnyNonFiniteBf16(reinterpret_cast<const char*>(finite.data()), 5));
  EXPECT_FALSE(AnyNonFiniteBf16(reinterpret_cast<const char*>(finite.data()), 4));
}

}  // namespace
}  // namespace pst::common
