// Random wide & deep parameters and batches, shared by the tests of the
// model's implementations (wide_deep_test, device_wide_deep_test,
// cuda_device_test).
#ifndef PST_MODELS_WIDE_DEEP_TEST_UTIL_H_
#define PST_MODELS_WIDE_DEEP_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "models/mlp_test_util.h"
#include "models/wide_deep.h"

namespace pst::models::wide_deep_testing {

// Glorot-uniform kernels, and biases drawn from [-bias_scale, bias_scale].
inline ParamSet RandomParams(const WideDeepConfig& config, std::mt19937* rng, float bias_scale) {
  return mlp_testing::RandomParamsFor(WideDeepDenseSpecs(config), bias_scale, rng);
}

inline std::vector<float> RandomVector(size_t n, float scale, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// A batch's data, owned; View() is the CtrBatch the models take (its size
// is the number of labels).
struct CtrBatchData {
  std::vector<float> dense, labels, deep_rows, wide_rows;
  std::vector<int32_t> slot;
  int num_unique = 0;

  CtrBatch View() const {
    CtrBatch b;
    b.size = static_cast<int>(labels.size());
    b.dense = dense.data();
    b.slot = slot.data();
    b.labels = labels.data();
    b.num_unique = num_unique;
    b.deep_rows = deep_rows.data();
    b.wide_rows = wide_rows.data();
    return b;
  }
};

// `size` examples over `num_unique` rows; slots are skewed towards the
// first rows, so rows recur within and across examples.
struct RandomBatch : CtrBatchData {
  RandomBatch(const WideDeepConfig& config, int size, int num_unique, std::mt19937* rng) {
    this->num_unique = num_unique;
    dense = RandomVector(static_cast<size_t>(size) * config.num_dense, 1.0f, rng);
    deep_rows = RandomVector(static_cast<size_t>(num_unique) * config.embedding_dim, 0.5f, rng);
    wide_rows = RandomVector(static_cast<size_t>(num_unique), 0.3f, rng);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int i = 0; i < size * config.num_fields; ++i) {
      const float r = u(*rng);
      slot.push_back(std::min(num_unique - 1, static_cast<int>(r * r * num_unique)));
    }
    for (int i = 0; i < size; ++i) labels.push_back(u(*rng) < 0.3f ? 1.0f : 0.0f);
  }
};

}  // namespace pst::models::wide_deep_testing

#endif  // PST_MODELS_WIDE_DEEP_TEST_UTIL_H_
