#include "models/device_mlp.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "device/cpu_device.h"
#include "device/device_mapping.h"
#include "gtest/gtest.h"
#include "models/mlp.h"
#include "models/mlp_test_util.h"

namespace pst::models {
namespace {

MlpConfig SmallConfig() {
  MlpConfig config;
  config.input_dim = 20;
  config.hidden = {16, 12};
  config.num_classes = 5;
  return config;
}

using mlp_testing::Batch;
using mlp_testing::ExpectParamsNear;

ParamSet RandomParams(const MlpConfig& config, std::mt19937* rng) {
  return mlp_testing::RandomParams(config, 0.1f, rng);
}

Batch RandomBatch(const MlpConfig& config, int n, std::mt19937* rng) {
  return mlp_testing::RandomBatch(config, n, std::normal_distribution<float>(0.0f, 1.0f), rng);
}

void SgdStep(const ParamSet& grads, float lr, ParamSet* params) {
  for (size_t p = 0; p < params->size(); ++p)
    for (size_t i = 0; i < (*params)[p].size(); ++i) (*params)[p][i] -= lr * grads[p][i];
}

TEST(DeviceMlpTest, LossAndGradients_CpuDevice_MatchesMlp) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(7);
  const ParamSet params = RandomParams(config, &rng);
  const Batch batch = RandomBatch(config, 33, &rng);
  Mlp reference(config);
  ParamSet want;
  absl::StatusOr<float> want_loss =
      reference.LossAndGradients(params, batch.x.data(), batch.y.data(), 33, &want);
  ASSERT_TRUE(want_loss.ok());

  std::unique_ptr<device::Device> device = device::NewCpuDevice(0);
  DeviceMlp model(config, device.get());
  ParamSet got;
  absl::StatusOr<float> loss =
      model.LossAndGradients(params, batch.x.data(), batch.y.data(), 33, &got);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(*loss, *want_loss, 1e-6f);
  ExpectParamsNear(got, want, 1e-6f);
}

TEST(DeviceMlpTest, ForwardAndEvaluate_CpuDevice_MatchMlp) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(8);
  const ParamSet params = RandomParams(config, &rng);
  const Batch batch = RandomBatch(config, 2500, &rng);  // three eval chunks
  Mlp reference(config);
  std::unique_ptr<device::Device> device = device::NewCpuDevice(0);
  DeviceMlp model(config, device.get());

  std::vector<float> want_logits, got_logits;
  ASSERT_TRUE(reference.Forward(params, batch.x.data(), 40, &want_logits).ok());
  ASSERT_TRUE(model.Forward(params, batch.x.data(), 40, &got_logits).ok());
  ExpectParamsNear({got_logits}, {want_logits}, 1e-6f);

  absl::StatusOr<Mlp::Eval> want = reference.Evaluate(params, batch.x.data(), batch.y.data(), 2500);
  absl::StatusOr<Mlp::Eval> got = model.Evaluate(params, batch.x.data(), batch.y.data(), 2500);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_DOUBLE_EQ(got->accuracy, want->accuracy);
  EXPECT_NEAR(got->loss, want->loss, 1e-6);
}

TEST(DeviceMlpTest, LossAndGradients_BadArguments_InvalidArgument) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(9);
  ParamSet params = RandomParams(config, &rng);
  Batch batch = RandomBatch(config, 4, &rng);
  std::unique_ptr<device::Device> device = device::NewCpuDevice(0);
  DeviceMlp model(config, device.get());
  ParamSet grads;
  batch.y[2] = config.num_classes;
  absl::StatusOr<float> r =
      model.LossAndGradients(params, batch.x.data(), batch.y.data(), 4, &grads);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "label of example 2")) << r.status();
  batch.y[2] = 0;
  params[1].pop_back();
  r = model.LossAndGradients(params, batch.x.data(), batch.y.data(), 4, &grads);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DeviceMlpTest, LossAndGradients_BudgetTooSmall_ResourceExhausted) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(10);
  const ParamSet params = RandomParams(config, &rng);
  const Batch batch = RandomBatch(config, 4000, &rng);
  std::unique_ptr<device::Device> device = device::NewCpuDevice(0, 256 << 10);
  DeviceMlp model(config, device.get());
  ParamSet grads;
  absl::StatusOr<float> r =
      model.LossAndGradients(params, batch.x.data(), batch.y.data(), 4000, &grads);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "CPU:0: out of memory")) << r.status();
}

TEST(MirroredMlpTest, ShardSizes_EvenSplitFirstShardsLarger) {
  EXPECT_EQ(MirroredMlp::ShardSizes(10, 3), (std::vector<int>{4, 3, 3}));
  EXPECT_EQ(MirroredMlp::ShardSizes(1, 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(MirroredMlp::ShardSizes(64, 2), (std::vector<int>{32, 32}));
}

// The --cpu_devices=2 path, built as the worker builds it.
std::unique_ptr<device::DeviceSet> CpuDevices(int n) {
  device::DeviceOptions options;
  options.device = "cpu";
  options.cpu_devices = n;
  absl::StatusOr<std::vector<device::LogicalDeviceSpec>> specs =
      device::PlanDevices(options, device::GpuInventory());
  EXPECT_TRUE(specs.ok());
  absl::StatusOr<std::unique_ptr<device::DeviceSet>> set = device::DeviceSet::Create(*specs);
  EXPECT_TRUE(set.ok());
  return std::move(*set);
}

TEST(MirroredMlpTest, TwoCpuDevices_SameGradientsAsOneDeviceWithWholeBatch) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(11);
  const ParamSet params = RandomParams(config, &rng);
  for (int batch_size : {64, 7, 1}) {
    SCOPED_TRACE(batch_size);
    const Batch batch = RandomBatch(config, batch_size, &rng);
    std::unique_ptr<device::DeviceSet> one = CpuDevices(1);
    std::unique_ptr<device::DeviceSet> two = CpuDevices(2);
    MirroredMlp single(config, one->devices());
    MirroredMlp mirrored(config, two->devices());
    ASSERT_EQ(mirrored.num_replicas(), 2);
    ParamSet want, got;
    absl::StatusOr<float> want_loss =
        single.LossAndGradients(params, batch.x.data(), batch.y.data(), batch_size, &want);
    absl::StatusOr<float> got_loss =
        mirrored.LossAndGradients(params, batch.x.data(), batch.y.data(), batch_size, &got);
    ASSERT_TRUE(want_loss.ok() && got_loss.ok()) << got_loss.status();
    EXPECT_NEAR(*got_loss, *want_loss, 1e-5f);
    ExpectParamsNear(got, want, 1e-5f);
  }
}

TEST(MirroredMlpTest, TwoCpuDevices_SameParametersAfterKSgdSteps) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(12);
  ParamSet p_one = RandomParams(config, &rng);
  ParamSet p_two = p_one;
  std::unique_ptr<device::DeviceSet> one = CpuDevices(1);
  std::unique_ptr<device::DeviceSet> two = CpuDevices(2);
  MirroredMlp single(config, one->devices());
  MirroredMlp mirrored(config, two->devices());
  Mlp reference(config);
  ParamSet p_ref = p_one;
  constexpr int kSteps = 20;
  constexpr int kBatch = 48;
  for (int step = 0; step < kSteps; ++step) {
    const Batch batch = RandomBatch(config, kBatch, &rng);
    ParamSet g_one, g_two, g_ref;
    ASSERT_TRUE(
        single.LossAndGradients(p_one, batch.x.data(), batch.y.data(), kBatch, &g_one).ok());
    ASSERT_TRUE(
        mirrored.LossAndGradients(p_two, batch.x.data(), batch.y.data(), kBatch, &g_two).ok());
    ASSERT_TRUE(
        reference.LossAndGradients(p_ref, batch.x.data(), batch.y.data(), kBatch, &g_ref).ok());
    SgdStep(g_one, 0.1f, &p_one);
    SgdStep(g_two, 0.1f, &p_two);
    SgdStep(g_ref, 0.1f, &p_ref);
  }
  ExpectParamsNear(p_two, p_one, 1e-4f);
  ExpectParamsNear(p_one, p_ref, 1e-5f);
}

// Prefetching: batches staged in alternating slots, each staged while the
// other slot's batch is computed on a second thread, give exactly the
// gradients of the unstaged call (same arithmetic on the CPU).
TEST(MirroredMlpTest, StagedBatches_WhileOtherSlotComputes_MatchUnstaged) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(13);
  const ParamSet params = RandomParams(config, &rng);
  std::unique_ptr<device::DeviceSet> two = CpuDevices(2);
  MirroredMlp staged(config, two->devices());
  MirroredMlp plain(config, two->devices());
  std::vector<Batch> batches;
  for (int n : {9, 16, 3, 1}) batches.push_back(RandomBatch(config, n, &rng));
  auto size = [&](size_t b) { return static_cast<int>(batches[b].y.size()); };
  ASSERT_TRUE(staged.Stage(0, batches[0].x.data(), batches[0].y.data(), size(0)).ok());
  for (size_t b = 0; b < batches.size(); ++b) {
    SCOPED_TRACE(b);
    const int slot = static_cast<int>(b % 2);
    absl::Status next_staged;
    std::thread stager([&] {
      if (b + 1 < batches.size()) {
        next_staged = staged.Stage(slot ^ 1, batches[b + 1].x.data(), batches[b + 1].y.data(),
                                   size(b + 1));
      }
    });
    ParamSet got, want;
    absl::StatusOr<float> got_loss = staged.LossAndGradientsStaged(slot, params, &got);
    stager.join();
    ASSERT_TRUE(next_staged.ok()) << next_staged;
    absl::StatusOr<float> want_loss =
        plain.LossAndGradients(params, batches[b].x.data(), batches[b].y.data(), size(b), &want);
    ASSERT_TRUE(got_loss.ok() && want_loss.ok()) << got_loss.status();
    EXPECT_EQ(*got_loss, *want_loss);
    ExpectParamsNear(got, want, 0.0f);
  }
}

TEST(MirroredMlpTest, Stage_BadSlotOrLabel_RejectedAndNothingStaged) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(14);
  const ParamSet params = RandomParams(config, &rng);
  std::unique_ptr<device::DeviceSet> two = CpuDevices(2);
  MirroredMlp mirrored(config, two->devices());
  Batch batch = RandomBatch(config, 4, &rng);
  EXPECT_EQ(mirrored.Stage(2, batch.x.data(), batch.y.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  batch.y[3] = config.num_classes;
  const absl::Status bad = mirrored.Stage(0, batch.x.data(), batch.y.data(), 4);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "label of example 3")) << bad;
  ParamSet grads;
  EXPECT_EQ(mirrored.LossAndGradientsStaged(0, params, &grads).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mirrored.LossAndGradientsStaged(1, params, &grads).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DeviceMlpTest, Lifecycle_AllocatorAccountingReturnsToZero) {
  const MlpConfig config = SmallConfig();
  std::mt19937 rng(13);
  const ParamSet params = RandomParams(config, &rng);
  const Batch batch = RandomBatch(config, 100, &rng);
  std::unique_ptr<device::DeviceSet> devices = CpuDevices(2);
  {
    MirroredMlp model(config, devices->devices());
    ParamSet grads;
    ASSERT_TRUE(model.LossAndGradients(params, batch.x.data(), batch.y.data(), 100, &grads).ok());
    std::vector<int64_t> raw_after_first;
    for (device::Device* d : devices->devices()) {
      raw_after_first.push_back(d->memory_stats().num_raw_allocs);
    }
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(model.LossAndGradients(params, batch.x.data(), batch.y.data(), 100, &grads).ok());
    }
    for (int i = 0; i < devices->size(); ++i) {
      const device::MemoryStats s = devices->device(i)->memory_stats();
      EXPECT_GT(s.bytes_in_use, 0);
      // Steady state: later steps allocate nothing new.
      EXPECT_EQ(s.num_raw_allocs, raw_after_first[i]);
    }
    ASSERT_TRUE(model.Evaluate(params, batch.x.data(), batch.y.data(), 100).ok());
  }
  for (device::Device* d : devices->devices()) {
    EXPECT_EQ(d->memory_stats().bytes_in_use, 0) << d->name();
    EXPECT_EQ(d->memory_stats().num_live_blocks, 0) << d->name();
    d->ReleaseCachedMemory();
    EXPECT_EQ(d->memory_stats().bytes_reserved, 0) << d->name();
  }
}

TEST(MirroredMlpTest, DevicePlacement_NamesEveryCopyAndOpPerDevice) {
  std::unique_ptr<device::DeviceSet> devices = CpuDevices(2);
  MirroredMlp model(SmallConfig(), devices->devices());
  const std::vector<std::string> lines = model.DevicePlacement("/job:worker/replica:0/task:3");
  auto has = [&](const std::string& line) {
    for (const std::string& l : lines) {
      if (l == line) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("dense_0/kernel: (VariableCopy): /job:worker/replica:0/task:3/device:CPU:1"));
  EXPECT_TRUE(has("dense_1/MatMul: (MatMul): /job:worker/replica:0/task:3/device:CPU:0"));
  EXPECT_TRUE(
      has("gradients/dense_0/ReluGrad: (ReluGrad): /job:worker/replica:0/task:3/device:CPU:1"));
  EXPECT_TRUE(absl::StrContains(lines.back(), "CrossDeviceSum (2 replicas")) << lines.back();
}

}  // namespace
}  // namespace pst::models
