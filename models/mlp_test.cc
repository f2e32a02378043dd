#include "models/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "models/mlp_test_util.h"

namespace pst::models {
namespace {

int64_t NumElements(const ParamSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  return n;
}

ParamSet RandomParams(const MlpConfig& config, std::mt19937* rng, float bias_scale) {
  return mlp_testing::RandomParams(config, bias_scale, rng);
}

ParamSet ZeroParams(const MlpConfig& config) {
  ParamSet params;
  for (const ParamSpec& spec : MlpParamSpecs(config)) {
    params.emplace_back(NumElements(spec), 0.0f);
  }
  return params;
}

std::vector<float> RandomVector(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(MlpTest, ParamSpecs_NamesShapesAndFans) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {5, 4};
  config.num_classes = 3;
  const std::vector<ParamSpec> specs = MlpParamSpecs(config);
  ASSERT_EQ(specs.size(), 6u);

  const std::vector<std::string> names = {"dense_0/kernel", "dense_0/bias",   "dense_1/kernel",
                                          "dense_1/bias",   "dense_2/kernel", "dense_2/bias"};
  const std::vector<std::vector<int64_t>> shapes = {{6, 5}, {5}, {5, 4}, {4}, {4, 3}, {3}};
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(specs[i].name, names[i]);
    EXPECT_EQ(specs[i].shape, shapes[i]);
    EXPECT_EQ(specs[i].is_kernel, i % 2 == 0);
    if (specs[i].is_kernel) {
      EXPECT_EQ(specs[i].fan_in, shapes[i][0]);
      EXPECT_EQ(specs[i].fan_out, shapes[i][1]);
    }
  }
}

TEST(MlpTest, ParamSpecs_DefaultConfig) {
  const std::vector<ParamSpec> specs = MlpParamSpecs(MlpConfig());
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{784, 256}));
  EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(specs[4].shape, (std::vector<int64_t>{128, 10}));
  EXPECT_EQ(specs[5].name, "dense_2/bias");
  EXPECT_EQ(specs[5].shape, (std::vector<int64_t>{10}));
}

TEST(MlpTest, Loss_ZeroWeightsIsLogNumClasses) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {5, 4};
  config.num_classes = 3;
  Mlp mlp(config);
  const ParamSet params = ZeroParams(config);
  std::mt19937 rng(7);
  const int batch = 4;
  const std::vector<float> x = RandomVector(batch * config.input_dim, &rng);
  const std::vector<int32_t> labels = {0, 2, 2, 1};
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), batch, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, std::log(3.0f), 1e-6);

  // All probabilities are 1/3, so the last bias gradient is the mean of
  // (1/3 - onehot): class 0 -> 1/3 - 1/4, class 1 -> 1/3 - 1/4,
  // class 2 -> 1/3 - 2/4. Everything before it is blocked by zero weights.
  ASSERT_EQ(grads.size(), params.size());
  EXPECT_NEAR(grads[5][0], 1.0f / 3 - 0.25f, 1e-6);
  EXPECT_NEAR(grads[5][1], 1.0f / 3 - 0.25f, 1e-6);
  EXPECT_NEAR(grads[5][2], 1.0f / 3 - 0.5f, 1e-6);
  for (size_t i = 0; i < 5; ++i) {
    for (float g : grads[i]) EXPECT_EQ(g, 0.0f) << "param " << i;
  }
}

TEST(MlpTest, Forward_MatchesHandComputation) {
  // input 2 -> hidden 2 (ReLU) -> 2 classes.
  MlpConfig config;
  config.input_dim = 2;
  config.hidden = {2};
  config.num_classes = 2;
  Mlp mlp(config);
  const ParamSet params = {
      {1.0f, -1.0f, 2.0f, 1.0f},  // dense_0/kernel [[1, -1], [2, 1]]
      {0.5f, -4.0f},              // dense_0/bias
      {1.0f, 0.0f, -1.0f, 3.0f},  // dense_1/kernel [[1, 0], [-1, 3]]
      {0.0f, 1.0f},               // dense_1/bias
  };
  const std::vector<float> x = {1.0f, 2.0f};
  // Hidden pre-activation: [1 + 4 + 0.5, -1 + 2 - 4] = [5.5, -3] -> ReLU [5.5, 0].
  // Logits: [5.5, 1].
  std::vector<float> logits;
  ASSERT_TRUE(mlp.Forward(params, x.data(), 1, &logits).ok());
  ASSERT_EQ(logits.size(), 2u);
  EXPECT_FLOAT_EQ(logits[0], 5.5f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f);

  // Loss for label 1: log(1 + exp(5.5 - 1)).
  const std::vector<int32_t> labels = {1};
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), 1, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, std::log1p(std::exp(4.5)), 1e-5);
  // The dead hidden unit passes no gradient to its kernel column or bias.
  EXPECT_EQ(grads[0][1], 0.0f);
  EXPECT_EQ(grads[0][3], 0.0f);
  EXPECT_EQ(grads[1][1], 0.0f);
}

TEST(MlpTest, Loss_StableForHugeLogits) {
  MlpConfig config;
  config.input_dim = 1;
  config.hidden = {};
  config.num_classes = 2;
  Mlp mlp(config);
  const ParamSet params = {{1.0f, -1.0f}, {0.0f, 0.0f}};
  const std::vector<float> x = {500.0f};  // logits [500, -500]
  const std::vector<int32_t> labels = {1};
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), 1, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, 1000.0f, 1e-3);
  for (const auto& g : grads) {
    for (float v : g) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(MlpTest, Gradients_MatchFiniteDifferences) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {5, 4};
  config.num_classes = 3;
  const int batch = 4;
  std::mt19937 rng(1234);
  ParamSet params = RandomParams(config, &rng, 0.5f);
  const std::vector<float> x = RandomVector(batch * config.input_dim, &rng);
  const std::vector<int32_t> labels = {2, 0, 1, 2};

  Mlp mlp(config);
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), batch, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_EQ(grads.size(), params.size());

  auto loss_at = [&](const ParamSet& p) {
    ParamSet unused;
    absl::StatusOr<float> l = mlp.LossAndGradients(p, x.data(), labels.data(), batch, &unused);
    EXPECT_TRUE(l.ok()) << l.status();
    return static_cast<double>(l.value_or(0.0f));
  };

  const std::vector<ParamSpec> specs = MlpParamSpecs(config);
  const float eps = 1e-3f;
  int checked = 0;
  int skipped = 0;
  for (size_t t = 0; t < params.size(); ++t) {
    ASSERT_EQ(grads[t].size(), params[t].size());
    for (size_t i = 0; i < params[t].size(); ++i) {
      const float saved = params[t][i];
      params[t][i] = saved + eps;
      const double plus = loss_at(params);
      params[t][i] = saved - eps;
      const double minus = loss_at(params);
      params[t][i] = saved;
      const double center = loss_at(params);
      // A perturbation that moves a ReLU pre-activation across zero makes
      // the two one-sided slopes disagree; the loss is not differentiable
      // there, so such a coordinate says nothing about the backward pass.
      const double forward = (plus - center) / eps;
      const double backward = (center - minus) / eps;
      if (std::abs(forward - backward) > 5e-3 + 5e-2 * std::abs(forward + backward)) {
        ++skipped;
        continue;
      }
      const double numeric = (plus - minus) / (2 * eps);
      const double analytic = grads[t][i];
      EXPECT_LE(std::abs(analytic - numeric), 2e-3 + 2e-2 * std::abs(numeric))
          << specs[t].name << "[" << i << "]: analytic " << analytic << ", numeric " << numeric;
      ++checked;
    }
  }
  // The net has 6*5+5 + 5*4+4 + 4*3+3 = 74 parameters; nearly all must be
  // checkable, or the test would be vacuous.
  EXPECT_EQ(checked + skipped, 74);
  EXPECT_LE(skipped, 4);
}

// The fused step (bias with ReLU, ReLU's gradient with the bias gradient's
// sums) against the unfused layers computed one pass each, in double.
TEST(MlpTest, FusedStep_EqualsUnfusedDoubleReference) {
  MlpConfig config;
  config.input_dim = 37;
  config.hidden = {19, 11};
  config.num_classes = 5;
  const int batch = 13;
  std::mt19937 rng(77);
  ParamSet params = RandomParams(config, &rng, 0.5f);
  const std::vector<float> x = RandomVector(batch * config.input_dim, &rng);
  std::vector<int32_t> labels(batch);
  for (int r = 0; r < batch; ++r) labels[r] = r % config.num_classes;

  Mlp mlp(config);
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), batch, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();

  std::vector<int> dims = {config.input_dim};
  dims.insert(dims.end(), config.hidden.begin(), config.hidden.end());
  dims.push_back(config.num_classes);
  const size_t layers = dims.size() - 1;
  // Forward: z = a W, z += b, a = relu(z): a pass each.
  std::vector<std::vector<double>> acts(layers + 1);
  acts[0].assign(x.begin(), x.end());
  int negative = 0;
  for (size_t l = 0; l < layers; ++l) {
    const int in = dims[l], out = dims[l + 1];
    std::vector<double> z(static_cast<size_t>(batch) * out, 0.0);
    for (int r = 0; r < batch; ++r) {
      for (int j = 0; j < out; ++j) {
        for (int k = 0; k < in; ++k) {
          z[r * out + j] += acts[l][r * in + k] * params[2 * l][k * out + j];
        }
      }
    }
    for (int r = 0; r < batch; ++r) {
      for (int j = 0; j < out; ++j) z[r * out + j] += params[2 * l + 1][j];
    }
    if (l + 1 < layers) {
      for (double& v : z) {
        negative += v < 0;
        v = std::max(v, 0.0);
      }
    }
    acts[l + 1] = std::move(z);
  }
  ASSERT_GT(negative, 0) << "no ReLU cut anything: the test checks nothing of its gradient";
  const int classes = config.num_classes;
  std::vector<double> dz(static_cast<size_t>(batch) * classes);
  double total = 0;
  for (int r = 0; r < batch; ++r) {
    const double* z = &acts[layers][r * classes];
    const double max = *std::max_element(z, z + classes);
    double sum = 0;
    for (int j = 0; j < classes; ++j) sum += std::exp(z[j] - max);
    total += std::log(sum) + max - z[labels[r]];
    for (int j = 0; j < classes; ++j) {
      dz[r * classes + j] = (std::exp(z[j] - max) / sum - (j == labels[r])) / batch;
    }
  }
  EXPECT_NEAR(*loss, total / batch, 1e-5);
  for (size_t l = layers; l-- > 0;) {
    const int in = dims[l], out = dims[l + 1];
    for (int k = 0; k < in; ++k) {
      for (int j = 0; j < out; ++j) {
        double w = 0;
        for (int r = 0; r < batch; ++r) w += acts[l][r * in + k] * dz[r * out + j];
        EXPECT_NEAR(grads[2 * l][k * out + j], w, 1e-5 + 1e-4 * std::abs(w)) << "kernel " << l;
      }
    }
    for (int j = 0; j < out; ++j) {
      double b = 0;
      for (int r = 0; r < batch; ++r) b += dz[r * out + j];
      EXPECT_NEAR(grads[2 * l + 1][j], b, 1e-5 + 1e-4 * std::abs(b)) << "bias " << l;
    }
    if (l == 0) break;
    std::vector<double> din(static_cast<size_t>(batch) * in, 0.0);
    for (int r = 0; r < batch; ++r) {
      for (int k = 0; k < in; ++k) {
        for (int j = 0; j < out; ++j)
          din[r * in + k] += dz[r * out + j] * params[2 * l][k * out + j];
        if (!(acts[l][r * in + k] > 0)) din[r * in + k] = 0;
      }
    }
    dz = std::move(din);
  }
}

TEST(MlpTest, Gradients_IndependentOfEarlierLargerBatch) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {5};
  config.num_classes = 3;
  std::mt19937 rng(99);
  const ParamSet params = RandomParams(config, &rng, 0.1f);
  const std::vector<float> x = RandomVector(16 * config.input_dim, &rng);
  std::vector<int32_t> labels(16);
  for (int i = 0; i < 16; ++i) labels[i] = i % 3;

  Mlp reused(config);
  ParamSet grads;
  ASSERT_TRUE(reused.LossAndGradients(params, x.data(), labels.data(), 16, &grads).ok());
  absl::StatusOr<float> small = reused.LossAndGradients(params, x.data(), labels.data(), 3, &grads);
  ASSERT_TRUE(small.ok()) << small.status();

  Mlp fresh(config);
  ParamSet fresh_grads;
  absl::StatusOr<float> expected =
      fresh.LossAndGradients(params, x.data(), labels.data(), 3, &fresh_grads);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(*small, *expected);
  EXPECT_EQ(grads, fresh_grads);
}

TEST(MlpTest, CheckParams_WrongSizeIsInvalidArgument) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {5, 4};
  config.num_classes = 3;
  Mlp mlp(config);
  ParamSet params = ZeroParams(config);
  params[2].resize(19);  // dense_1/kernel should have 20.
  const std::vector<float> x(6, 0.0f);
  const std::vector<int32_t> labels = {0};
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), 1, &grads);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(loss.status().message());
  EXPECT_TRUE(absl::StrContains(message, "dense_1/kernel")) << message;
  EXPECT_TRUE(absl::StrContains(message, "19")) << message;
  EXPECT_TRUE(absl::StrContains(message, "20")) << message;

  std::vector<float> logits;
  EXPECT_EQ(mlp.Forward(params, x.data(), 1, &logits).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mlp.Evaluate(params, x.data(), labels.data(), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MlpTest, CheckParams_WrongCountIsInvalidArgument) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {5, 4};
  config.num_classes = 3;
  Mlp mlp(config);
  ParamSet params = ZeroParams(config);
  params.pop_back();
  const std::vector<float> x(6, 0.0f);
  std::vector<float> logits;
  const absl::Status status = mlp.Forward(params, x.data(), 1, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "6")) << status.message();
  EXPECT_TRUE(absl::StrContains(status.message(), "5")) << status.message();
}

TEST(MlpTest, BadLabel_IsInvalidArgument) {
  MlpConfig config;
  config.input_dim = 2;
  config.hidden = {3};
  config.num_classes = 3;
  Mlp mlp(config);
  const ParamSet params = ZeroParams(config);
  const std::vector<float> x(8, 0.5f);
  ParamSet grads;
  for (int32_t bad : {3, -1, 1000}) {
    SCOPED_TRACE(bad);
    const std::vector<int32_t> labels = {0, 1, bad, 2};
    absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), 4, &grads);
    ASSERT_FALSE(loss.ok());
    EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(loss.status().message());
    EXPECT_TRUE(absl::StrContains(message, "example 2")) << message;
    EXPECT_TRUE(absl::StrContains(message, std::to_string(bad))) << message;
    EXPECT_EQ(mlp.Evaluate(params, x.data(), labels.data(), 4).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(MlpTest, BadBatch_IsInvalidArgument) {
  MlpConfig config;
  config.input_dim = 2;
  config.hidden = {3};
  config.num_classes = 3;
  Mlp mlp(config);
  const ParamSet params = ZeroParams(config);
  const std::vector<float> x(2, 0.5f);
  const std::vector<int32_t> labels = {0};
  ParamSet grads;
  std::vector<float> logits;
  for (int batch : {0, -3}) {
    EXPECT_EQ(mlp.LossAndGradients(params, x.data(), labels.data(), batch, &grads).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(mlp.Forward(params, x.data(), batch, &logits).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(mlp.Evaluate(params, x.data(), labels.data(), batch).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(mlp.LossAndGradients(params, x.data(), labels.data(), 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MlpTest, Evaluate_MatchesForwardAcrossChunks) {
  MlpConfig config;
  config.input_dim = 5;
  config.hidden = {7};
  config.num_classes = 4;
  const int n = 2345;  // more than one evaluation chunk, and not a multiple of it
  std::mt19937 rng(5);
  const ParamSet params = RandomParams(config, &rng, 0.2f);
  const std::vector<float> x = RandomVector(static_cast<size_t>(n) * config.input_dim, &rng);
  std::vector<int32_t> labels(n);
  std::uniform_int_distribution<int32_t> label_dist(0, config.num_classes - 1);
  for (int32_t& l : labels) l = label_dist(rng);

  Mlp mlp(config);
  std::vector<float> logits;
  ASSERT_TRUE(mlp.Forward(params, x.data(), n, &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(n) * config.num_classes);
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = logits.data() + static_cast<size_t>(i) * config.num_classes;
    if (std::max_element(z, z + config.num_classes) - z == labels[i]) ++correct;
  }
  ParamSet grads;
  absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data(), labels.data(), n, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();

  absl::StatusOr<Mlp::Eval> eval = mlp.Evaluate(params, x.data(), labels.data(), n);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_DOUBLE_EQ(eval->accuracy, static_cast<double>(correct) / n);
  EXPECT_NEAR(eval->loss, *loss, 1e-5);
}

TEST(MlpTest, Sgd_LearnsSeparableProblem) {
  // Three well-separated Gaussian clusters in 4 dimensions.
  MlpConfig config;
  config.input_dim = 4;
  config.hidden = {8};
  config.num_classes = 3;
  const int n = 300;
  const float centers[3][4] = {{2, 0, 0, -1}, {-2, 1, 0, 1}, {0, -2, 2, 0}};
  std::mt19937 rng(42);
  std::normal_distribution<float> noise(0.0f, 0.4f);
  std::vector<float> x(static_cast<size_t>(n) * config.input_dim);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) {
    labels[i] = i % 3;
    for (int j = 0; j < config.input_dim; ++j) {
      x[i * config.input_dim + j] = centers[labels[i]][j] + noise(rng);
    }
  }

  ParamSet params = RandomParams(config, &rng, 0.0f);
  Mlp mlp(config);
  ParamSet grads;
  float initial_loss = 0;
  float final_loss = 0;
  const int batch = 30;
  const float learning_rate = 0.1f;
  for (int step = 0; step < 300; ++step) {
    const int start = (step * batch) % n;
    absl::StatusOr<float> loss = mlp.LossAndGradients(params, x.data() + start * config.input_dim,
                                                      labels.data() + start, batch, &grads);
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (step == 0) initial_loss = *loss;
    final_loss = *loss;
    for (size_t t = 0; t < params.size(); ++t) {
      for (size_t i = 0; i < params[t].size(); ++i) params[t][i] -= learning_rate * grads[t][i];
    }
  }
  EXPECT_LT(final_loss, 0.3f * initial_loss);

  absl::StatusOr<Mlp::Eval> eval = mlp.Evaluate(params, x.data(), labels.data(), n);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_GT(eval->accuracy, 0.9);
  EXPECT_LT(eval->loss, 0.3 * initial_loss);
}

}  // namespace
}  // namespace pst::models
