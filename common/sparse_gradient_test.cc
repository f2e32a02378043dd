#include "common/sparse_gradient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace pst::common {
namespace {

struct Entry {
  uint32_t index;
  float value;
};

std::vector<Entry> Entries(const std::vector<float>& payload) {
  const size_t k = payload.size() / 2;
  std::vector<Entry> out(k);
  for (size_t e = 0; e < k; ++e) {
    std::memcpy(&out[e].index, &payload[e], 4);
    out[e].value = payload[k + e];
  }
  return out;
}

std::string Bytes(const std::vector<float>& payload) {
  return std::string(reinterpret_cast<const char*>(payload.data()), payload.size() * 4);
}

TEST(SparseGradientTest, TopKCount_CeilingAtLeastOneAtMostAll) {
  EXPECT_EQ(TopKCount(1000, 0.01), 10);
  EXPECT_EQ(TopKCount(1001, 0.01), 11);
  EXPECT_EQ(TopKCount(5, 0.01), 1);
  EXPECT_EQ(TopKCount(5, 1.0), 5);
  EXPECT_EQ(TopKCount(0, 0.5), 0);
}

TEST(SparseGradientTest, Compress_SendsTheLargestMagnitudes_InIndexOrder_TiesToTheLowerIndex) {
  const std::vector<float> grad = {0.5f, -3.0f, 1.0f, 2.0f, -1.0f, 0.0f, 1.0f};
  const std::vector<float> residual(grad.size(), 0.0f);
  std::vector<float> next(grad.size()), payload;
  CompressTopK(grad, residual, 3, next, &payload);
  const std::vector<Entry> sent = Entries(payload);
  ASSERT_EQ(sent.size(), 3u);
  // |-3|, |2|, then the first of the three 1s (index 2).
  EXPECT_EQ(sent[0].index, 1u);
  EXPECT_EQ(sent[0].value, -3.0f);
  EXPECT_EQ(sent[1].index, 2u);
  EXPECT_EQ(sent[1].value, 1.0f);
  EXPECT_EQ(sent[2].index, 3u);
  EXPECT_EQ(sent[2].value, 2.0f);
  EXPECT_EQ(next, (std::vector<float>{0.5f, 0.0f, 0.0f, 0.0f, -1.0f, 0.0f, 1.0f}));
}

TEST(SparseGradientTest, Compress_EmptyPiece_SendsNothing) {
  std::vector<float> payload = {1.0f}, none;
  CompressTopK(none, none, TopKCount(0, 0.5), none, &payload);
  EXPECT_TRUE(payload.empty());
}

TEST(SparseGradientTest, Compress_NanIsSentFirst) {
  const std::vector<float> grad = {1.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f};
  const std::vector<float> residual(3, 0.0f);
  std::vector<float> next(3), payload;
  CompressTopK(grad, residual, 1, next, &payload);
  const std::vector<Entry> sent = Entries(payload);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].index, 1u);
  EXPECT_TRUE(std::isnan(sent[0].value));
  EXPECT_EQ(next[2], 5.0f);
}

// Error feedback's invariant: at every step what is sent plus the residual
// kept is exactly the gradient plus the residual before; so over the steps
// the updates sent plus the last residual add up to the gradients pushed.
TEST(SparseGradientTest, ErrorFeedback_SentPlusResidual_EqualsTheGradientsPushed) {
  constexpr size_t kN = 1000;
  std::mt19937 rng(9);
  std::normal_distribution<double> g(0, 1);
  std::vector<float> residual(kN, 0.0f), next(kN), payload;
  std::vector<double> pushed(kN, 0.0), applied(kN, 0.0);
  for (int step = 0; step < 50; ++step) {
    std::vector<float> grad(kN);
    for (float& x : grad) x = static_cast<float>(g(rng));
    CompressTopK(grad, residual, TopKCount(kN, 0.05), next, &payload);
    std::vector<float> dense(kN);
    const std::string bytes = Bytes(payload);
    const std::string_view view(bytes);
    ASSERT_TRUE(ExpandSparseGradient(PayloadParts(&view, 1), dense).ok());
    for (size_t i = 0; i < kN; ++i) {
      // Exactly, entry by entry: each entry of grad + residual is either
      // sent or kept.
      ASSERT_EQ(dense[i] + next[i], grad[i] + residual[i]) << step << " " << i;
      ASSERT_TRUE(dense[i] == 0.0f || next[i] == 0.0f);
      pushed[i] += grad[i];
      applied[i] += dense[i];
    }
    residual = next;
  }
  for (size_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(applied[i] + residual[i], pushed[i], 1e-4) << i;
  }
}

TEST(SparseGradientTest, Expand_CutPayload_AndBadPayloadsNamingTheProblem) {
  std::vector<float> payload = {0, 0, 0, 7.0f, -1.0f, 2.5f};
  const uint32_t indices[3] = {0, 4, 9};
  std::memcpy(payload.data(), indices, sizeof(indices));
  const std::string bytes = Bytes(payload);
  const std::string_view view(bytes);
  const std::vector<std::string_view> cut = {view.substr(0, 5), view.substr(5, 9), view.substr(14)};
  std::vector<float> dense(10, 3.0f);
  ASSERT_TRUE(ExpandSparseGradient(cut, dense).ok());
  EXPECT_EQ(dense, (std::vector<float>{7.0f, 0, 0, 0, -1.0f, 0, 0, 0, 0, 2.5f}));

  auto refused = [&](const std::string& b, size_t n, const std::string& says) {
    const std::string_view v(b);
    std::vector<float> out(n);
    const absl::Status status = ExpandSparseGradient(PayloadParts(&v, 1), out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << says;
    EXPECT_NE(status.message().find(says), std::string::npos) << status;
  };
  refused(bytes.substr(0, 23), 10, "whole number of 8-byte entries");
  refused(bytes, 2, "3 entries for a tensor of 2");
  refused(bytes, 9, "past the tensor's 9 elements");
  std::vector<float> repeated = payload;
  const uint32_t again[3] = {0, 4, 4};
  std::memcpy(repeated.data(), again, sizeof(again));
  refused(Bytes(repeated), 10, "not above the one before (4)");
}

}  // namespace
}  // namespace pst::common
