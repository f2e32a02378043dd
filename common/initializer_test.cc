#include "common/initializer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace pst::common {
namespace {

proto::VariableSpec Spec(proto::Initializer::Kind kind, std::vector<int64_t> shape,
                         uint64_t seed = 7) {
  proto::VariableSpec spec;
  spec.set_name("v");
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(kind);
  spec.mutable_initializer()->set_seed(seed);
  spec.mutable_initializer()->set_scale(0.5f);
  spec.mutable_initializer()->set_value(3.0f);
  return spec;
}

TEST(InitializerTest, Fill_AnyPartitioning_GivesSameValues) {
  for (auto kind : {proto::Initializer::UNIFORM, proto::Initializer::NORMAL,
                    proto::Initializer::GLOROT_UNIFORM}) {
    const proto::VariableSpec spec = Spec(kind, {10, 7});
    std::vector<float> whole(70);
    FillInitialValues(spec, 0, whole);
    std::vector<float> pieces(70);
    FillInitialValues(spec, 0, std::span<float>(pieces).subspan(0, 33));
    FillInitialValues(spec, 33, std::span<float>(pieces).subspan(33));
    EXPECT_EQ(whole, pieces) << proto::Initializer::Kind_Name(kind);
  }
}

// Element k is defined by CounterUniform(seed, k) (uniform) and the pair
// 2k, 2k + 1 (normal, Box-Muller): a fill must give exactly those values,
// however it computes them, as checkpoints and re-made rows rely on it.
TEST(InitializerTest, Fill_GivesExactlyTheCounterDefinition) {
  const int64_t first = (int64_t{1} << 40) + 12345;  // far in, as hash rows are
  const proto::VariableSpec uniform = Spec(proto::Initializer::UNIFORM, {1 << 20, 64}, 99);
  // Lengths that fill whole vector lanes and that leave a tail (the uniform
  // fill runs 8 lanes at once on CPUs with AVX-512).
  for (size_t n : {1, 7, 64, 1003}) {
    std::vector<float> got(n);
    FillInitialValues(uniform, first, got);
    for (size_t i = 0; i < got.size(); ++i) {
      const double u = CounterUniform(99, static_cast<uint64_t>(first) + i);
      ASSERT_EQ(got[i], static_cast<float>((2.0 * u - 1.0) * 0.5f)) << i << " of " << n;
    }
  }
  std::vector<float> got(64);
  const proto::VariableSpec normal = Spec(proto::Initializer::NORMAL, {1 << 20, 64}, 99);
  FillInitialValues(normal, first, got);
  for (size_t i = 0; i < got.size(); ++i) {
    const uint64_t k = static_cast<uint64_t>(first) + i;
    const double z = std::sqrt(-2.0 * std::log(1.0 - CounterUniform(99, 2 * k))) *
                     std::cos(2 * std::numbers::pi * CounterUniform(99, 2 * k + 1));
    EXPECT_EQ(got[i], static_cast<float>(z * 0.5f)) << i;
  }
}

TEST(InitializerTest, Fill_DifferentSeeds_GiveDifferentValues) {
  std::vector<float> a(16), b(16);
  FillInitialValues(Spec(proto::Initializer::UNIFORM, {16}, 1), 0, a);
  FillInitialValues(Spec(proto::Initializer::UNIFORM, {16}, 2), 0, b);
  EXPECT_NE(a, b);
}

TEST(InitializerTest, GlorotUniform_StaysWithinKerasLimit_AndCoversIt) {
  const proto::VariableSpec spec = Spec(proto::Initializer::GLOROT_UNIFORM, {300, 100});
  std::vector<float> v(30000);
  FillInitialValues(spec, 0, v);
  const double limit = std::sqrt(6.0 / (300 + 100));
  double lo = 0, hi = 0, sum = 0;
  for (float x : v) {
    ASSERT_LE(std::abs(x), limit);
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
    sum += x;
  }
  EXPECT_LT(lo, -0.95 * limit);
  EXPECT_GT(hi, 0.95 * limit);
  EXPECT_NEAR(sum / v.size(), 0.0, 0.01 * limit);
}

TEST(InitializerTest, Normal_HasRequestedMoments) {
  std::vector<float> v(200000);
  FillInitialValues(Spec(proto::Initializer::NORMAL, {200000}), 0, v);
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / v.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / v.size() - mean * mean), 0.5, 0.01);
}

TEST(InitializerTest, ZerosAndConstant_FillExactly) {
  std::vector<float> v(5, 9.0f);
  FillInitialValues(Spec(proto::Initializer::ZEROS, {5}), 0, v);
  EXPECT_EQ(v, std::vector<float>(5, 0.0f));
  FillInitialValues(Spec(proto::Initializer::CONSTANT, {5}), 0, v);
  EXPECT_EQ(v, std::vector<float>(5, 3.0f));
}

TEST(InitializerTest, Validate_BadScaleOrRank_IsInvalidArgument) {
  proto::VariableSpec spec = Spec(proto::Initializer::UNIFORM, {4});
  spec.mutable_initializer()->set_scale(-1);
  EXPECT_EQ(ValidateInitializer(spec).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateInitializer(Spec(proto::Initializer::GLOROT_UNIFORM, {4})).code(),
            absl::StatusCode::kInvalidArgument);
  proto::VariableSpec constant = Spec(proto::Initializer::CONSTANT, {4});
  constant.mutable_initializer()->set_value(NAN);
  EXPECT_EQ(ValidateInitializer(constant).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateInitializer(Spec(proto::Initializer::GLOROT_UNIFORM, {4, 4})).ok());
}

}  // namespace
}  // namespace pst::common
