#include "models/wide_deep.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/criteo.h"
#include "gtest/gtest.h"
#include "models/wide_deep_test_util.h"

namespace pst::models {
namespace {

using wide_deep_testing::RandomParams;
using wide_deep_testing::RandomVector;

WideDeepConfig TinyConfig() {
  WideDeepConfig config;
  config.num_dense = 3;
  config.num_fields = 4;
  config.embedding_dim = 2;
  config.hidden = {5, 3};
  return config;
}

// A batch of 6 examples over 7 unique rows; rows 0 and 2 recur many times,
// row 6 is never used.
wide_deep_testing::CtrBatchData MakeTinyBatch(const WideDeepConfig& config, std::mt19937* rng) {
  wide_deep_testing::CtrBatchData t;
  t.slot = {0, 1, 2, 0,  //
            2, 3, 0, 0,  //
            4, 2, 2, 5,  //
            0, 1, 3, 2,  //
            5, 5, 0, 4,  //
            2, 0, 1, 0};
  t.labels = {1, 0, 0, 1, 1, 0};
  t.num_unique = 7;
  t.dense = RandomVector(6 * config.num_dense, 1.0f, rng);
  t.deep_rows = RandomVector(t.num_unique * config.embedding_dim, 0.7f, rng);
  t.wide_rows = RandomVector(t.num_unique, 0.3f, rng);
  return t;
}

TEST(WideDeepTest, DenseSpecs_NamesAndShapes) {
  const std::vector<ParamSpec> specs = WideDeepDenseSpecs(TinyConfig());
  ASSERT_EQ(specs.size(), 7u);
  const std::vector<std::string> names = {
      "wide/bias",         "deep/dense_0/kernel", "deep/dense_0/bias", "deep/dense_1/kernel",
      "deep/dense_1/bias", "deep/dense_2/kernel", "deep/dense_2/bias"};
  const std::vector<std::vector<int64_t>> shapes = {{1}, {11, 5}, {5}, {5, 3}, {3}, {3, 1}, {1}};
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(specs[i].name, names[i]);
    EXPECT_EQ(specs[i].shape, shapes[i]);
    EXPECT_EQ(specs[i].is_kernel, i % 2 == 1);
    if (specs[i].is_kernel) {
      EXPECT_EQ(specs[i].fan_in, shapes[i][0]);
      EXPECT_EQ(specs[i].fan_out, shapes[i][1]);
    }
  }
  // Default: 26 * 8 + 13 = 221 inputs.
  const std::vector<ParamSpec> defaults = WideDeepDenseSpecs(WideDeepConfig());
  ASSERT_EQ(defaults.size(), 7u);
  EXPECT_EQ(defaults[1].shape, (std::vector<int64_t>{221, 64}));
  EXPECT_EQ(defaults[5].shape, (std::vector<int64_t>{32, 1}));
}

TEST(WideDeepTest, Forward_MatchesHandComputation) {
  // No hidden layer: logit = wide_bias + sum wide + deep kernel . [rows, dense] + deep bias.
  WideDeepConfig config;
  config.num_dense = 1;
  config.num_fields = 2;
  config.embedding_dim = 1;
  config.hidden = {};
  WideDeep model(config);
  const ParamSet params = {{0.5f}, {1.0f, -2.0f, 3.0f}, {0.25f}};
  const std::vector<float> dense = {2.0f};
  const std::vector<int32_t> slot = {1, 1};
  const std::vector<float> labels = {1.0f};
  const std::vector<float> deep_rows = {10.0f, 0.5f};
  const std::vector<float> wide_rows = {7.0f, -0.1f};
  CtrBatch batch{1, dense.data(),     slot.data(),     labels.data(),
                 2, deep_rows.data(), wide_rows.data()};
  // wide = 0.5 - 0.2 = 0.3; deep = 0.5 - 1 + 6 + 0.25 = 5.75; logit 6.05.
  const double logit = 6.05;
  std::vector<float> probs;
  ASSERT_TRUE(model.Predict(params, batch, &probs).ok());
  ASSERT_EQ(probs.size(), 1u);
  EXPECT_NEAR(probs[0], 1.0 / (1.0 + std::exp(-logit)), 1e-6);

  ParamSet grads;
  std::vector<float> deep_grads;
  std::vector<float> wide_grads;
  absl::StatusOr<float> loss =
      model.LossAndGradients(params, batch, &grads, &deep_grads, &wide_grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, std::log1p(std::exp(-logit)), 1e-6);
  const double dz = 1.0 / (1.0 + std::exp(-logit)) - 1.0;
  EXPECT_NEAR(grads[0][0], dz, 1e-6);
  EXPECT_NEAR(wide_grads[0], 0.0, 1e-9);
  EXPECT_NEAR(wide_grads[1], 2 * dz, 1e-6);
  EXPECT_NEAR(deep_grads[0], 0.0, 1e-9);
  EXPECT_NEAR(deep_grads[1], (1.0 - 2.0) * dz, 1e-6);
}

TEST(WideDeepTest, Loss_StableForHugeLogits) {
  WideDeepConfig config;
  config.num_dense = 1;
  config.num_fields = 1;
  config.embedding_dim = 1;
  config.hidden = {};
  WideDeep model(config);
  const ParamSet params = {{0.0f}, {0.0f, 1.0f}, {0.0f}};
  const std::vector<float> dense = {500.0f, -500.0f};
  const std::vector<int32_t> slot = {0, 0};
  const std::vector<float> labels = {0.0f, 1.0f};
  const std::vector<float> rows = {0.0f};
  CtrBatch batch{2, dense.data(), slot.data(), labels.data(), 1, rows.data(), rows.data()};
  ParamSet grads;
  std::vector<float> deep_grads;
  std::vector<float> wide_grads;
  absl::StatusOr<float> loss =
      model.LossAndGradients(params, batch, &grads, &deep_grads, &wide_grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, 500.0f, 1e-3);
  for (const auto& g : grads) {
    for (float v : g) EXPECT_TRUE(std::isfinite(v));
  }
  EXPECT_NEAR(grads[0][0], 0.0f, 1e-6);  // (1 - 0 + 0 - 1) / 2
}

TEST(WideDeepTest, Gradients_MatchFiniteDifferences) {
  const WideDeepConfig config = TinyConfig();
  std::mt19937 rng(2024);
  ParamSet params = RandomParams(config, &rng, 0.5f);
  auto tiny = MakeTinyBatch(config, &rng);

  WideDeep model(config);
  ParamSet grads;
  std::vector<float> deep_grads;
  std::vector<float> wide_grads;
  absl::StatusOr<float> loss =
      model.LossAndGradients(params, tiny.View(), &grads, &deep_grads, &wide_grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_EQ(grads.size(), params.size());
  ASSERT_EQ(deep_grads.size(), 7u * 2);
  ASSERT_EQ(wide_grads.size(), 7u);
  // Row 6 is in the batch's unique set but no example uses it.
  EXPECT_EQ(deep_grads[12], 0.0f);
  EXPECT_EQ(deep_grads[13], 0.0f);
  EXPECT_EQ(wide_grads[6], 0.0f);

  WideDeep probe(config);
  auto loss_now = [&]() {
    ParamSet g;
    std::vector<float> dg;
    std::vector<float> wg;
    absl::StatusOr<float> l = probe.LossAndGradients(params, tiny.View(), &g, &dg, &wg);
    EXPECT_TRUE(l.ok()) << l.status();
    return static_cast<double>(l.value_or(0.0f));
  };

  // Every coordinate: (name, pointer to it, analytic gradient).
  struct Coordinate {
    std::string name;
    float* value;
    float analytic;
  };
  std::vector<Coordinate> coords;
  const std::vector<ParamSpec> specs = WideDeepDenseSpecs(config);
  for (size_t t = 0; t < params.size(); ++t) {
    ASSERT_EQ(grads[t].size(), params[t].size());
    for (size_t i = 0; i < params[t].size(); ++i) {
      coords.push_back({specs[t].name + "[" + std::to_string(i) + "]", &params[t][i], grads[t][i]});
    }
  }
  for (size_t i = 0; i < tiny.deep_rows.size(); ++i) {
    coords.push_back({"deep_row[" + std::to_string(i) + "]", &tiny.deep_rows[i], deep_grads[i]});
  }
  for (size_t i = 0; i < tiny.wide_rows.size(); ++i) {
    coords.push_back({"wide_row[" + std::to_string(i) + "]", &tiny.wide_rows[i], wide_grads[i]});
  }

  const float eps = 1e-3f;
  int checked = 0;
  int skipped = 0;
  for (const Coordinate& c : coords) {
    const float saved = *c.value;
    *c.value = saved + eps;
    const double plus = loss_now();
    *c.value = saved - eps;
    const double minus = loss_now();
    *c.value = saved;
    const double center = loss_now();
    // A perturbation that moves a ReLU pre-activation across zero makes the
    // one-sided slopes disagree; such a coordinate says nothing.
    const double forward = (plus - center) / eps;
    const double backward = (center - minus) / eps;
    if (std::abs(forward - backward) > 5e-3 + 5e-2 * std::abs(forward + backward)) {
      ++skipped;
      continue;
    }
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_LE(std::abs(c.analytic - numeric), 2e-3 + 2e-2 * std::abs(numeric))
        << c.name << ": analytic " << c.analytic << ", numeric " << numeric;
    ++checked;
  }
  // 1 + (11*5+5) + (5*3+3) + (3+1) = 83 dense, 14 deep-row and 7 wide-row values.
  EXPECT_EQ(checked + skipped, 83 + 14 + 7);
  EXPECT_LE(skipped, 5);
  // The repeated rows carry a visible gradient (the check is not vacuous).
  EXPECT_GT(std::abs(wide_grads[0]), 1e-3f);
  EXPECT_GT(std::abs(deep_grads[4]) + std::abs(deep_grads[5]), 1e-4f);
}

TEST(WideDeepTest, Gradients_IndependentOfEarlierLargerBatch) {
  const WideDeepConfig config = TinyConfig();
  std::mt19937 rng(3);
  const ParamSet params = RandomParams(config, &rng, 0.2f);
  auto tiny = MakeTinyBatch(config, &rng);
  CtrBatch small = tiny.View();
  small.size = 2;

  WideDeep reused(config);
  ParamSet grads;
  std::vector<float> dg;
  std::vector<float> wg;
  ASSERT_TRUE(reused.LossAndGradients(params, tiny.View(), &grads, &dg, &wg).ok());
  absl::StatusOr<float> loss = reused.LossAndGradients(params, small, &grads, &dg, &wg);
  ASSERT_TRUE(loss.ok()) << loss.status();

  WideDeep fresh(config);
  ParamSet fresh_grads;
  std::vector<float> fresh_dg;
  std::vector<float> fresh_wg;
  absl::StatusOr<float> expected =
      fresh.LossAndGradients(params, small, &fresh_grads, &fresh_dg, &fresh_wg);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(*loss, *expected);
  EXPECT_EQ(grads, fresh_grads);
  EXPECT_EQ(dg, fresh_dg);
  EXPECT_EQ(wg, fresh_wg);

  std::vector<float> probs;
  ASSERT_TRUE(reused.Predict(params, small, &probs).ok());
  EXPECT_EQ(probs.size(), 2u);
}

TEST(WideDeepTest, BadInputs_AreInvalidArgument) {
  const WideDeepConfig config = TinyConfig();
  std::mt19937 rng(11);
  const ParamSet params = RandomParams(config, &rng, 0.1f);
  WideDeep model(config);
  ParamSet grads;
  std::vector<float> dg;
  std::vector<float> wg;
  std::vector<float> probs;

  auto expect_invalid = [&](const ParamSet& p, const CtrBatch& b, const std::string& needle,
                            bool predict_too) {
    absl::StatusOr<float> loss = model.LossAndGradients(p, b, &grads, &dg, &wg);
    ASSERT_FALSE(loss.ok());
    EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(loss.status().message(), needle)) << loss.status();
    if (predict_too) {
      EXPECT_EQ(model.Predict(p, b, &probs).code(), absl::StatusCode::kInvalidArgument);
    }
  };

  {
    SCOPED_TRACE("slot out of range");
    auto tiny = MakeTinyBatch(config, &rng);
    tiny.slot[9] = 7;
    expect_invalid(params, tiny.View(), "example 2, field 1", true);
    tiny.slot[9] = -1;
    expect_invalid(params, tiny.View(), "-1", true);
  }
  {
    SCOPED_TRACE("label 2");
    auto tiny = MakeTinyBatch(config, &rng);
    tiny.labels[4] = 2.0f;
    expect_invalid(params, tiny.View(), "example 4", false);
    EXPECT_TRUE(model.Predict(params, tiny.View(), &probs).ok());  // labels unused
  }
  {
    SCOPED_TRACE("wrong param size");
    auto tiny = MakeTinyBatch(config, &rng);
    ParamSet bad = params;
    bad[3].resize(14);  // deep/dense_1/kernel is [5, 3]
    expect_invalid(bad, tiny.View(), "deep/dense_1/kernel", true);
    bad = params;
    bad.pop_back();
    expect_invalid(bad, tiny.View(), "7", true);
  }
  {
    SCOPED_TRACE("batch <= 0");
    auto tiny = MakeTinyBatch(config, &rng);
    CtrBatch b = tiny.View();
    b.size = 0;
    expect_invalid(params, b, "0", true);
  }
  {
    SCOPED_TRACE("null outputs");
    auto tiny = MakeTinyBatch(config, &rng);
    EXPECT_EQ(model.LossAndGradients(params, tiny.View(), &grads, nullptr, &wg).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model.Predict(params, tiny.View(), nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(AucTest, HandWorkedCases) {
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f, 0.3f, 0.4f}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.4f, 0.3f, 0.2f, 0.1f}, {0, 0, 1, 1}), 0.0);
  // Ties count half: every pair tied.
  EXPECT_DOUBLE_EQ(Auc({0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 1}), 0.5);
  // Positive 0.5 ties one negative (half) and beats one (0.2): pairs
  // (0.5 vs 0.2) = 1, (0.5 vs 0.5) = 0.5, (0.9 vs both) = 2; 3.5 / 4.
  EXPECT_DOUBLE_EQ(Auc({0.2f, 0.5f, 0.5f, 0.9f}, {0, 0, 1, 1}), 0.875);
  // One class only.
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.7f, 0.3f}, {1, 1, 1}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.7f, 0.3f}, {0, 0, 0}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({}, {}), 0.5);
}

TEST(AucTest, MatchesPairCounting) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> bucket(0, 9);  // many ties
  std::bernoulli_distribution coin(0.3);
  std::vector<float> scores(500);
  std::vector<float> labels(500);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = 0.1f * static_cast<float>(bucket(rng));
    labels[i] = coin(rng) ? 1.0f : 0.0f;
  }
  double wins = 0;
  double pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] != 1.0f || labels[j] != 0.0f) continue;
      pairs += 1;
      wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
    }
  }
  EXPECT_NEAR(Auc(scores, labels), wins / pairs, 1e-12);
}

TEST(LogLossTest, HandCaseAndClipping) {
  EXPECT_NEAR(LogLoss({0.8f, 0.4f}, {1, 0}), -(std::log(0.8) + std::log(0.6)) / 2, 1e-6);
  // p = 0 for a positive is clipped to 1e-7: -log(1e-7) = 16.118...
  EXPECT_NEAR(LogLoss({0.0f}, {1}), -std::log(1e-7), 1e-6);
  EXPECT_NEAR(LogLoss({1.0f}, {0}), -std::log(1e-7), 1e-2);
  EXPECT_TRUE(std::isfinite(LogLoss({1.0f, 0.0f}, {0, 1})));
}

TEST(UniqueIdsTest, FirstSeenOrderAndIndex) {
  const std::vector<int64_t> ids = {42, 7, 42, -3, 7, 1LL << 40, 42};
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  UniqueIds(ids.data(), static_cast<int64_t>(ids.size()), &unique, &index);
  EXPECT_EQ(unique, (std::vector<int64_t>{42, 7, -3, 1LL << 40}));
  EXPECT_EQ(index, (std::vector<int32_t>{0, 1, 0, 2, 1, 3, 0}));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(unique[index[i]], ids[i]);

  // Outputs are replaced, not appended to.
  UniqueIds(ids.data(), 2, &unique, &index);
  EXPECT_EQ(unique, (std::vector<int64_t>{42, 7}));
  EXPECT_EQ(index, (std::vector<int32_t>{0, 1}));
  UniqueIds(ids.data(), 0, &unique, &index);
  EXPECT_TRUE(unique.empty());
  EXPECT_TRUE(index.empty());
}

// A local stand-in for the ps: embedding rows by id, created on first use.
class LocalTable {
 public:
  LocalTable(int dim, std::mt19937* rng) : dim_(dim), rng_(rng) {}

  // Gathers the rows of `unique` (creating missing ones when `create`,
  // else reading zeros for them).
  void Gather(const std::vector<int64_t>& unique, bool create, std::vector<float>* deep,
              std::vector<float>* wide) {
    deep->assign(unique.size() * dim_, 0.0f);
    wide->assign(unique.size(), 0.0f);
    std::normal_distribution<float> init(0.0f, 0.05f);
    for (size_t u = 0; u < unique.size(); ++u) {
      auto it = row_.find(unique[u]);
      if (it == row_.end()) {
        if (!create) continue;
        it = row_.emplace(unique[u], static_cast<int>(wide_.size())).first;
        for (int d = 0; d < dim_; ++d) deep_.push_back(init(*rng_));
        wide_.push_back(0.0f);
      }
      std::copy_n(deep_.begin() + static_cast<size_t>(it->second) * dim_, dim_,
                  deep->begin() + u * dim_);
      (*wide)[u] = wide_[it->second];
    }
  }

  void Apply(const std::vector<int64_t>& unique, const std::vector<float>& deep_grads,
             const std::vector<float>& wide_grads, float lr) {
    for (size_t u = 0; u < unique.size(); ++u) {
      const int r = row_.at(unique[u]);
      for (int d = 0; d < dim_; ++d) {
        deep_[static_cast<size_t>(r) * dim_ + d] -= lr * deep_grads[u * dim_ + d];
      }
      wide_[r] -= lr * wide_grads[u];
    }
  }

 private:
  int dim_;
  std::mt19937* rng_;
  absl::flat_hash_map<int64_t, int> row_;
  std::vector<float> deep_;
  std::vector<float> wide_;
};

TEST(WideDeepTest, Sgd_ApproachesBestAucOnSyntheticCriteo) {
  const auto started = std::chrono::steady_clock::now();
  data::SyntheticCriteoConfig data_config;
  data_config.rows = 60000;
  data_config.vocab_per_field = 100;
  data_config.seed = 5;
  const std::string path = (std::filesystem::path(testing::TempDir()) /
                            absl::StrCat("wide_deep_test_", getpid(), "_synthetic.txt"))
                               .string();
  absl::StatusOr<data::SyntheticCriteoStats> stats = data::WriteSyntheticCriteo(path, data_config);
  ASSERT_TRUE(stats.ok()) << stats.status();
  absl::StatusOr<data::CtrDataset> train = data::ReadCriteo(path, data::CtrFeatureConfig{0});
  std::error_code ec;
  std::filesystem::remove(path, ec);
  ASSERT_TRUE(train.ok()) << train.status();
  data::CtrDataset held_out;
  data::SplitHeldOut(&*train, 0.2, &held_out);
  ASSERT_EQ(held_out.size, 12000);

  WideDeepConfig config;
  config.embedding_dim = 4;
  config.hidden = {16};
  std::mt19937 rng(17);
  ParamSet params = RandomParams(config, &rng, 0.0f);
  LocalTable table(config.embedding_dim, &rng);
  WideDeep model(config);

  const int batch = 512;
  const int steps = 300;
  const float dense_lr = 0.1f;
  const float row_lr = 4.0f;  // row gradients are means over the batch: rare rows see little
  ParamSet grads;
  std::vector<float> deep_grads;
  std::vector<float> wide_grads;
  std::vector<int64_t> unique;
  std::vector<int32_t> slot;
  std::vector<float> deep_rows;
  std::vector<float> wide_rows;
  const int64_t n = train->size;
  for (int step = 0; step < steps; ++step) {
    const int64_t start = (static_cast<int64_t>(step) * batch) % (n - batch);
    UniqueIds(train->ids.data() + start * data::kCriteoFields, int64_t{batch} * data::kCriteoFields,
              &unique, &slot);
    table.Gather(unique, /*create=*/true, &deep_rows, &wide_rows);
    CtrBatch b;
    b.size = batch;
    b.dense = train->dense.data() + start * data::kCriteoDense;
    b.slot = slot.data();
    b.labels = train->labels.data() + start;
    b.num_unique = static_cast<int>(unique.size());
    b.deep_rows = deep_rows.data();
    b.wide_rows = wide_rows.data();
    absl::StatusOr<float> loss =
        model.LossAndGradients(params, b, &grads, &deep_grads, &wide_grads);
    ASSERT_TRUE(loss.ok()) << loss.status();
    for (size_t t = 0; t < params.size(); ++t) {
      for (size_t i = 0; i < params[t].size(); ++i) params[t][i] -= dense_lr * grads[t][i];
    }
    table.Apply(unique, deep_grads, wide_grads, row_lr);
  }

  UniqueIds(held_out.ids.data(), held_out.size * data::kCriteoFields, &unique, &slot);
  table.Gather(unique, /*create=*/false, &deep_rows, &wide_rows);
  CtrBatch eval;
  eval.size = static_cast<int>(held_out.size);
  eval.dense = held_out.dense.data();
  eval.slot = slot.data();
  eval.num_unique = static_cast<int>(unique.size());
  eval.deep_rows = deep_rows.data();
  eval.wide_rows = wide_rows.data();
  std::vector<float> probs;
  ASSERT_TRUE(model.Predict(params, eval, &probs).ok());
  const double auc = Auc(probs, held_out.labels);
  const double logloss = LogLoss(probs, held_out.labels);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("best_auc %.4f positive_rate %.4f held-out auc %.4f logloss %.4f (%.2f s)\n",
              stats->best_auc, stats->positive_rate, auc, logloss, seconds);
  EXPECT_GT(auc, stats->best_auc - 0.05);
}

}  // namespace
}  // namespace pst::models
