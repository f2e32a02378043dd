// Random MLP parameters and batches, and a tolerance check, shared by the
// tests that compare devices and model implementations.
#ifndef PST_MODELS_MLP_TEST_UTIL_H_
#define PST_MODELS_MLP_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "models/mlp.h"

namespace pst::models::mlp_testing {

// For each spec: Glorot-uniform kernels; biases uniform in
// [-bias_limit, bias_limit] (zero, and no draws, when bias_limit is 0).
inline ParamSet RandomParamsFor(const std::vector<ParamSpec>& specs, float bias_limit,
                                std::mt19937* rng) {
  ParamSet params;
  for (const ParamSpec& spec : specs) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    const float limit = spec.is_kernel
                            ? std::sqrt(6.0f / static_cast<float>(spec.fan_in + spec.fan_out))
                            : bias_limit;
    std::vector<float> p(n, 0.0f);
    if (limit > 0) {
      std::uniform_real_distribution<float> dist(-limit, limit);
      for (float& v : p) v = dist(*rng);
    }
    params.push_back(std::move(p));
  }
  return params;
}

inline ParamSet RandomParams(const MlpConfig& config, float bias_limit, std::mt19937* rng) {
  return RandomParamsFor(MlpParamSpecs(config), bias_limit, rng);
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

// n examples with inputs drawn from `pixel` and uniform labels.
template <typename Distribution>
Batch RandomBatch(const MlpConfig& config, int n, Distribution pixel, std::mt19937* rng) {
  Batch b;
  b.x.resize(static_cast<size_t>(n) * config.input_dim);
  for (float& v : b.x) v = pixel(*rng);
  std::uniform_int_distribution<int> label(0, config.num_classes - 1);
  for (int i = 0; i < n; ++i) b.y.push_back(label(*rng));
  return b;
}

// Every element within tol * (1 + |want|).
inline void ExpectParamsNear(const ParamSet& got, const ParamSet& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].size(), want[p].size());
    for (size_t i = 0; i < got[p].size(); ++i) {
      ASSERT_NEAR(got[p][i], want[p][i], tol * (1.0f + std::abs(want[p][i])))
          << "param " << p << " element " << i;
    }
  }
}

}  // namespace pst::models::mlp_testing

#endif  // PST_MODELS_MLP_TEST_UTIL_H_
