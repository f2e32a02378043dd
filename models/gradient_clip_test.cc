// Clipping by global norm: a spiked gradient is scaled to the norm over
// dense and row gradients together; one within the norm is left alone.
#include "models/gradient_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace pst::models {
namespace {

double SumOfSquares(std::initializer_list<const client::Values*> parts) {
  double sum = 0;
  for (const client::Values* part : parts) {
    for (const auto& g : *part) {
      for (float x : g) sum += static_cast<double>(x) * x;
    }
  }
  return sum;
}

TEST(GradientClipTest, SpikedGradient_IsScaledToTheNormOverDenseAndRows) {
  client::Values dense = {{3.0f, 0.0f}, {0.0f}};
  client::Values rows = {{4.0f, 0.0f, 0.0f, 0.0f}, {12.0f}};  // two tables
  const client::Values dense_before = dense, rows_before = rows;
  // |g| = sqrt(9 + 16 + 144) = 13.
  EXPECT_DOUBLE_EQ(ClipByGlobalNorm(1.3, {&dense, &rows}), 13.0);
  EXPECT_NEAR(std::sqrt(SumOfSquares({&dense, &rows})), 1.3, 1e-6);
  // Every element by the same factor, directions kept.
  const float scale = static_cast<float>(1.3 / (13.0 + 1e-6));
  EXPECT_FLOAT_EQ(dense[0][0], dense_before[0][0] * scale);
  EXPECT_FLOAT_EQ(rows[0][0], rows_before[0][0] * scale);
  EXPECT_FLOAT_EQ(rows[1][0], rows_before[1][0] * scale);
  EXPECT_EQ(dense[0][1], 0.0f);
}

TEST(GradientClipTest, GradientWithinTheNorm_OrNoNorm_IsLeftAsItIs) {
  client::Values dense = {{0.3f, -0.4f}};
  EXPECT_NEAR(ClipByGlobalNorm(1.0, {&dense}), 0.5, 1e-7);
  EXPECT_EQ(dense[0][0], 0.3f);
  EXPECT_EQ(dense[0][1], -0.4f);
  EXPECT_EQ(ClipByGlobalNorm(0.0, {&dense}), 0.0);
  EXPECT_EQ(dense[0][0], 0.3f);
}

TEST(GradientClipTest, NonFiniteGradient_IsLeftForThePsToRefuse) {
  client::Values dense = {{std::numeric_limits<float>::quiet_NaN(), 5.0f}};
  EXPECT_TRUE(std::isnan(ClipByGlobalNorm(1.0, {&dense})));
  EXPECT_EQ(dense[0][1], 5.0f);
}

}  // namespace
}  // namespace pst::models
