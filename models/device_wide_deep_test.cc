// The wide & deep model on devices against the CPU reference WideDeep: one
// CPU device, two (MirroredWideDeep, the --cpu_devices=2 path), configs
// without fields or dense features, and bad inputs. cuda_device_test runs
// the same comparison on a GPU.
#include "models/device_wide_deep.h"

#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "device/cpu_device.h"
#include "gtest/gtest.h"
#include "models/mlp_test_util.h"
#include "models/wide_deep.h"
#include "models/wide_deep_test_util.h"

namespace pst::models {
namespace {

using mlp_testing::ExpectParamsNear;
using wide_deep_testing::RandomBatch;
using wide_deep_testing::RandomParams;

WideDeepConfig SmallConfig() {
  WideDeepConfig config;
  config.num_dense = 5;
  config.num_fields = 6;
  config.embedding_dim = 4;
  config.hidden = {16, 8};
  return config;
}

struct Grads {
  ParamSet dense;
  std::vector<float> deep_rows, wide_rows;
  float loss = 0;
};

template <typename Model>
Grads Compute(Model* model, const ParamSet& params, const CtrBatch& batch) {
  Grads g;
  absl::StatusOr<float> loss =
      model->LossAndGradients(params, batch, &g.dense, &g.deep_rows, &g.wide_rows);
  EXPECT_TRUE(loss.ok()) << loss.status();
  g.loss = loss.value_or(0);
  return g;
}

void ExpectGradsNear(const Grads& got, const Grads& want, float tol) {
  EXPECT_NEAR(got.loss, want.loss, tol * (1 + std::abs(want.loss)));
  ExpectParamsNear(got.dense, want.dense, tol);
  ExpectParamsNear({got.deep_rows, got.wide_rows}, {want.deep_rows, want.wide_rows}, tol);
}

TEST(DeviceWideDeepTest, CpuDevice_MatchesWideDeep) {
  std::mt19937 rng(21);
  for (WideDeepConfig config : {SmallConfig(), [] {
                                  WideDeepConfig c = SmallConfig();
                                  c.num_dense = 0;  // embeddings only
                                  c.hidden = {};
                                  return c;
                                }(),
                                [] {
                                  WideDeepConfig c = SmallConfig();
                                  c.num_fields = 0;  // dense features only
                                  return c;
                                }()}) {
    SCOPED_TRACE(testing::Message() << config.num_dense << " dense, " << config.num_fields
                                    << " fields, " << config.hidden.size() << " hidden");
    const ParamSet params = RandomParams(config, &rng, 0.2f);
    const RandomBatch batch(config, 37, 23, &rng);
    std::unique_ptr<device::Device> cpu = device::NewCpuDevice(0);
    WideDeep reference(config);
    DeviceWideDeep model(config, cpu.get());
    const Grads want = Compute(&reference, params, batch.View());
    const Grads got = Compute(&model, params, batch.View());
    ExpectGradsNear(got, want, 1e-5f);

    std::vector<float> want_probs, got_probs;
    ASSERT_TRUE(reference.Predict(params, batch.View(), &want_probs).ok());
    ASSERT_TRUE(model.Predict(params, batch.View(), &got_probs).ok());
    ExpectParamsNear({got_probs}, {want_probs}, 1e-6f);
  }
}

TEST(MirroredWideDeepTest, TwoCpuDevices_SameGradientsAsOneDevice) {
  const WideDeepConfig config = SmallConfig();
  std::mt19937 rng(22);
  const ParamSet params = RandomParams(config, &rng, 0.2f);
  std::unique_ptr<device::Device> a = device::NewCpuDevice(0);
  std::unique_ptr<device::Device> b = device::NewCpuDevice(1);
  MirroredWideDeep one(config, {a.get()});
  MirroredWideDeep two(config, {a.get(), b.get()});
  WideDeep reference(config);
  for (int size : {64, 7, 1}) {
    SCOPED_TRACE(size);
    const RandomBatch batch(config, size, 11, &rng);
    const Grads want = Compute(&reference, params, batch.View());
    ExpectGradsNear(Compute(&one, params, batch.View()), want, 1e-5f);
    ExpectGradsNear(Compute(&two, params, batch.View()), want, 1e-5f);
  }
  EXPECT_EQ(two.num_replicas(), 2);
  const std::vector<std::string> lines = two.DevicePlacement("/job:worker/replica:0/task:1");
  int on_cpu1 = 0;
  for (const std::string& line : lines) on_cpu1 += absl::StrContains(line, "/device:CPU:1");
  EXPECT_EQ(on_cpu1 * 2 + 1, static_cast<int>(lines.size())) << "each replica lists every op";
}

TEST(DeviceWideDeepTest, BadInputs_InvalidArgumentAndNoGradients) {
  const WideDeepConfig config = SmallConfig();
  std::mt19937 rng(23);
  const ParamSet params = RandomParams(config, &rng, 0.2f);
  std::unique_ptr<device::Device> cpu = device::NewCpuDevice(0);
  MirroredWideDeep model(config, {cpu.get()});
  RandomBatch batch(config, 4, 5, &rng);
  Grads g;
  batch.slot[7] = 5;  // one past the unique rows
  absl::StatusOr<float> loss =
      model.LossAndGradients(params, batch.View(), &g.dense, &g.deep_rows, &g.wide_rows);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(loss.status().message(), "slot of example 1, field 1"))
      << loss.status();
  batch.slot[7] = 0;
  batch.labels[2] = 0.5f;
  loss = model.LossAndGradients(params, batch.View(), &g.dense, &g.deep_rows, &g.wide_rows);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  ParamSet short_params = params;
  short_params[1].pop_back();
  batch.labels[2] = 1.0f;
  loss = model.LossAndGradients(short_params, batch.View(), &g.dense, &g.deep_rows, &g.wide_rows);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(g.dense.empty() && g.deep_rows.empty() && g.wide_rows.empty());
}

TEST(DeviceWideDeepTest, BudgetTooSmall_ResourceExhaustedNamingTheBudget) {
  const WideDeepConfig config = SmallConfig();
  std::mt19937 rng(24);
  const ParamSet params = RandomParams(config, &rng, 0.2f);
  std::unique_ptr<device::Device> cpu = device::NewCpuDevice(0, 4096);
  DeviceWideDeep model(config, cpu.get());
  const RandomBatch batch(config, 256, 50, &rng);
  Grads g;
  absl::StatusOr<float> loss =
      model.LossAndGradients(params, batch.View(), &g.dense, &g.deep_rows, &g.wide_rows);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(loss.status().message(), "4096")) << loss.status();
}

}  // namespace
}  // namespace pst::models
