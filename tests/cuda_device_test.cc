// The CUDA Device against the CPU reference: every op, a full MLP training
// step, several logical devices on one GPU, the memory budget and the
// allocator's accounting. Every test skips when no GPU is visible (or the
// binary was built without CUDA), so this runs cleanly on CPU-only machines.
//
// DISABLED_Timing prints GEMM and MLP step times, CPU vs GPU:
//   cuda_device_test --gtest_also_run_disabled_tests --gtest_filter='*Timing*'
#include "device/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#include "models/device_mlp.h"
#include "models/device_wide_deep.h"
#include "models/mlp.h"
#include "models/mlp_test_util.h"
#include "models/wide_deep.h"
#include "models/wide_deep_test_util.h"
#include "models/background.h"

namespace pst::models {
namespace {

using device::Device;
using device::DeviceBuffer;
using device::DeviceSet;

// Why the GPU tests cannot run here, or "" when they can.
std::string NoGpuReason() {
  if (!device::CudaBackendBuilt()) return "built without CUDA";
  absl::StatusOr<std::vector<device::GpuInfo>> gpus = device::ListCudaRuntimeGpus();
  if (!gpus.ok()) return std::string(gpus.status().message());
  if (gpus->empty()) return "the CUDA runtime lists no GPU";
  return "";
}

#define PST_SKIP_WITHOUT_GPU()                                         \
  do {                                                                 \
    const std::string reason = NoGpuReason();                          \
    if (!reason.empty()) GTEST_SKIP() << "no GPU visible: " << reason; \
  } while (0)

std::unique_ptr<DeviceSet> GpuDevices(int virtual_devices, const std::string& gpu_memory,
                                      absl::Status* status = nullptr) {
  device::DeviceOptions options = device::DeviceOptionsWithEnvironment(device::DeviceOptions());
  options.device = "gpu";
  options.gpus = "";
  options.virtual_devices = virtual_devices;
  options.gpu_memory = gpu_memory;
  absl::StatusOr<std::vector<device::LogicalDeviceSpec>> specs =
      device::PlanDevices(options, device::DiscoverGpus());
  if (!specs.ok()) {
    if (status != nullptr) *status = specs.status();
    ADD_FAILURE() << specs.status();
    return nullptr;
  }
  specs->resize(virtual_devices);  // the first GPU's logical devices
  absl::StatusOr<std::unique_ptr<DeviceSet>> set = DeviceSet::Create(*specs);
  if (status != nullptr) *status = set.status();
  if (!set.ok()) return nullptr;
  return std::move(*set);
}

std::vector<float> Random(size_t n, std::mt19937* rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

DeviceBuffer Upload(Device* d, const void* host, size_t bytes) {
  absl::StatusOr<DeviceBuffer> b = d->Allocate(bytes);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(d->CopyToDevice(b->data(), host, bytes).ok());
  return std::move(*b);
}
DeviceBuffer Upload(Device* d, const std::vector<float>& v) {
  return Upload(d, v.data(), v.size() * sizeof(float));
}
DeviceBuffer Upload(Device* d, const std::vector<int32_t>& v) {
  return Upload(d, v.data(), v.size() * sizeof(int32_t));
}
std::vector<float> Download(Device* d, const DeviceBuffer& b, size_t n) {
  std::vector<float> out(n);
  const absl::Status s = d->CopyToHost(out.data(), b.data(), n * sizeof(float));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::abs(want[i]))) << "at " << i;
  }
}

// Runs `op` on a CPU and a GPU device over copies of the same inputs and
// compares the outputs.
class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PST_SKIP_WITHOUT_GPU();
    gpus_ = GpuDevices(1, "growth");
    ASSERT_NE(gpus_, nullptr);
    gpu_ = gpus_->device(0);
    cpu_ = device::NewCpuDevice(0);
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_TRUE(gpu_->Synchronize().ok());
    }
  }

  std::unique_ptr<DeviceSet> gpus_;
  Device* gpu_ = nullptr;
  std::unique_ptr<Device> cpu_;
  std::mt19937 rng_{1234};
};

TEST_F(CudaOpsTest, Gemm_AllTransposesAndStrides_MatchCpu) {
  const int m = 129, n = 67, k = 255;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const int a_rows = ta ? k : m, a_cols = ta ? m : k;
      const int b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int lda = a_cols + 5, ldb = b_cols + 2, ldc = n + 7;
      const std::vector<float> a = Random(static_cast<size_t>(a_rows) * lda, &rng_);
      const std::vector<float> b = Random(static_cast<size_t>(b_rows) * ldb, &rng_);
      const std::vector<float> c = Random(static_cast<size_t>(m) * ldc, &rng_);
      std::vector<float> results[2];
      Device* devices[2] = {cpu_.get(), gpu_};
      for (int d = 0; d < 2; ++d) {
        DeviceBuffer da = Upload(devices[d], a), db = Upload(devices[d], b),
                     dc = Upload(devices[d], c);
        ASSERT_TRUE(
            devices[d]
                ->Gemm(ta, tb, m, n, k, 0.5f, da.f32(), lda, db.f32(), ldb, 2.0f, dc.f32(), ldc)
                .ok());
        results[d] = Download(devices[d], dc, c.size());
      }
      ExpectNear(results[1], results[0], 1e-4f);
    }
  }
}

TEST_F(CudaOpsTest, ElementwiseOpsAndColumnSums_MatchCpu) {
  const int rows = 1000, cols = 300;
  const std::vector<float> x = Random(rows * cols, &rng_);
  const std::vector<float> bias = Random(cols, &rng_);
  const std::vector<float> g = Random(rows * cols, &rng_);
  std::vector<float> out[2][5];
  Device* devices[2] = {cpu_.get(), gpu_};
  for (int d = 0; d < 2; ++d) {
    Device* dev = devices[d];
    DeviceBuffer dx = Upload(dev, x), db = Upload(dev, bias), dg = Upload(dev, g);
    DeviceBuffer sums = *dev->Allocate(cols * sizeof(float));
    ASSERT_TRUE(dev->BiasAdd(rows, cols, db.f32(), dx.f32()).ok());
    out[d][0] = Download(dev, dx, x.size());
    ASSERT_TRUE(dev->Relu(rows * cols, dx.f32()).ok());
    out[d][1] = Download(dev, dx, x.size());
    ASSERT_TRUE(dev->ReluGrad(rows * cols, dx.f32(), dg.f32()).ok());
    out[d][2] = Download(dev, dg, g.size());
    ASSERT_TRUE(dev->ColumnSums(rows, cols, dg.f32(), sums.f32()).ok());
    out[d][3] = Download(dev, sums, cols);
    ASSERT_TRUE(dev->Fill(rows * cols, -3.0f, dx.f32()).ok());
    out[d][4] = Download(dev, dx, x.size());
  }
  ExpectNear(out[1][0], out[0][0], 0);      // BiasAdd
  ExpectNear(out[1][1], out[0][1], 0);      // Relu
  ExpectNear(out[1][2], out[0][2], 0);      // ReluGrad
  ExpectNear(out[1][3], out[0][3], 1e-4f);  // ColumnSums (another summation order)
  ExpectNear(out[1][4], out[0][4], 0);      // Fill
}

TEST_F(CudaOpsTest, SoftmaxCrossEntropy_NarrowAndWideRows_MatchCpu) {
  for (int cols : {10, 1000}) {
    SCOPED_TRACE(cols);
    const int rows = 77;
    const std::vector<float> z = Random(rows * cols, &rng_, 4.0f);
    std::vector<int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7919) % cols;
    std::vector<float> loss[2], dz[2];
    Device* devices[2] = {cpu_.get(), gpu_};
    for (int d = 0; d < 2; ++d) {
      Device* dev = devices[d];
      DeviceBuffer dzin = Upload(dev, z), dl = Upload(dev, labels);
      DeviceBuffer dloss = *dev->Allocate(rows * sizeof(float));
      DeviceBuffer dd = *dev->Allocate(z.size() * sizeof(float));
      ASSERT_TRUE(dev->SoftmaxCrossEntropy(rows, cols, dzin.f32(), dl.i32(), 1.0f / rows,
                                           dloss.f32(), dd.f32())
                      .ok());
      loss[d] = Download(dev, dloss, rows);
      dz[d] = Download(dev, dd, z.size());
    }
    ExpectNear(loss[1], loss[0], 1e-5f);
    ExpectNear(dz[1], dz[0], 1e-5f);
  }
}

TEST_F(CudaOpsTest, SigmoidCrossEntropy_MatchesCpu) {
  const int n = 5000;
  const std::vector<float> z = Random(n, &rng_, 10.0f);
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) y[i] = static_cast<float>(i % 2);
  std::vector<float> loss[2], dz[2];
  Device* devices[2] = {cpu_.get(), gpu_};
  for (int d = 0; d < 2; ++d) {
    Device* dev = devices[d];
    DeviceBuffer dzin = Upload(dev, z), dy = Upload(dev, y);
    DeviceBuffer dloss = *dev->Allocate(n * sizeof(float));
    DeviceBuffer dd = *dev->Allocate(n * sizeof(float));
    ASSERT_TRUE(
        dev->SigmoidCrossEntropy(n, dzin.f32(), dy.f32(), 0.01f, dloss.f32(), dd.f32()).ok());
    loss[d] = Download(dev, dloss, n);
    dz[d] = Download(dev, dd, n);
  }
  ExpectNear(loss[1], loss[0], 1e-5f);
  ExpectNear(dz[1], dz[0], 1e-5f);
}

TEST_F(CudaOpsTest, GatherAndScatterAddRows_RepeatedIds_MatchCpu) {
  const int table_rows = 500, dim = 8, examples = 300, fields = 26;
  const int stride = fields * dim + 13;
  const int n = examples * fields;
  const std::vector<float> table = Random(table_rows * dim, &rng_);
  std::vector<int32_t> index(n);
  std::uniform_int_distribution<int> pick(0, 49);  // many repeats
  for (int32_t& i : index) i = pick(rng_) * 10;
  const std::vector<float> grad = Random(static_cast<size_t>(examples) * stride, &rng_);
  std::vector<float> gathered[2], summed[2];
  Device* devices[2] = {cpu_.get(), gpu_};
  for (int d = 0; d < 2; ++d) {
    Device* dev = devices[d];
    DeviceBuffer dt = Upload(dev, table), di = Upload(dev, index), dg = Upload(dev, grad);
    DeviceBuffer out = Upload(dev, std::vector<float>(static_cast<size_t>(examples) * stride, 0));
    ASSERT_TRUE(dev->GatherRows(n, dim, dt.f32(), di.i32(), fields, stride, out.f32()).ok());
    gathered[d] = Download(dev, out, static_cast<size_t>(examples) * stride);
    DeviceBuffer acc = Upload(dev, std::vector<float>(table_rows * dim, 0.0f));
    ASSERT_TRUE(dev->ScatterAddRows(n, dim, dg.f32(), fields, stride, di.i32(), acc.f32()).ok());
    summed[d] = Download(dev, acc, table_rows * dim);
  }
  ExpectNear(gathered[1], gathered[0], 0);
  ExpectNear(summed[1], summed[0], 1e-4f);
}

MlpConfig FashionMlp() { return MlpConfig(); }  // 784-256-128-10

using mlp_testing::Batch;
using mlp_testing::ExpectParamsNear;

ParamSet RandomParams(const MlpConfig& config, std::mt19937* rng) {
  return mlp_testing::RandomParams(config, 0.05f, rng);
}

Batch RandomBatch(const MlpConfig& config, int n, std::mt19937* rng) {
  return mlp_testing::RandomBatch(config, n, std::uniform_real_distribution<float>(0.0f, 1.0f),
                                  rng);
}

TEST(CudaMlpTest, TrainingStep_MatchesCpuMlp) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(1, "growth");
  ASSERT_NE(gpus, nullptr);
  const MlpConfig config = FashionMlp();
  std::mt19937 rng(5);
  ParamSet p_gpu = RandomParams(config, &rng);
  ParamSet p_cpu = p_gpu;
  Mlp reference(config);
  DeviceMlp model(config, gpus->device(0));
  // A few SGD steps: gradients and parameters stay within float tolerance.
  for (int step = 0; step < 5; ++step) {
    const Batch batch = RandomBatch(config, 256, &rng);
    ParamSet g_gpu, g_cpu;
    absl::StatusOr<float> loss_gpu =
        model.LossAndGradients(p_gpu, batch.x.data(), batch.y.data(), 256, &g_gpu);
    absl::StatusOr<float> loss_cpu =
        reference.LossAndGradients(p_cpu, batch.x.data(), batch.y.data(), 256, &g_cpu);
    ASSERT_TRUE(loss_gpu.ok()) << loss_gpu.status();
    ASSERT_TRUE(loss_cpu.ok());
    EXPECT_NEAR(*loss_gpu, *loss_cpu, 1e-5f * (1 + *loss_cpu));
    ExpectParamsNear(g_gpu, g_cpu, 1e-4f);
    for (size_t p = 0; p < p_gpu.size(); ++p) {
      for (size_t i = 0; i < p_gpu[p].size(); ++i) {
        p_gpu[p][i] -= 0.1f * g_gpu[p][i];
        p_cpu[p][i] -= 0.1f * g_cpu[p][i];
      }
    }
  }
  ExpectParamsNear(p_gpu, p_cpu, 1e-4f);
  const Batch test = RandomBatch(config, 2500, &rng);
  absl::StatusOr<Mlp::Eval> e_gpu = model.Evaluate(p_gpu, test.x.data(), test.y.data(), 2500);
  absl::StatusOr<Mlp::Eval> e_cpu = reference.Evaluate(p_cpu, test.x.data(), test.y.data(), 2500);
  ASSERT_TRUE(e_gpu.ok() && e_cpu.ok());
  EXPECT_NEAR(e_gpu->loss, e_cpu->loss, 1e-4);
  EXPECT_NEAR(e_gpu->accuracy, e_cpu->accuracy, 2.0 / 2500);
}

TEST(CudaMlpTest, TwoVirtualDevices_MatchOneDeviceWithWholeBatch) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(2, "growth");
  ASSERT_NE(gpus, nullptr);
  ASSERT_EQ(gpus->size(), 2);
  EXPECT_EQ(gpus->device(1)->name(), "GPU:1");
  for (const device::LogicalDeviceSpec& spec : gpus->specs()) {
    std::printf("%s\n", device::DeviceLogLine(spec, "/job:worker/replica:0/task:0").c_str());
  }
  const MlpConfig config = FashionMlp();
  std::mt19937 rng(6);
  const ParamSet params = RandomParams(config, &rng);
  const Batch batch = RandomBatch(config, 301, &rng);
  MirroredMlp mirrored(config, gpus->devices());
  Mlp reference(config);
  ParamSet got, want;
  absl::StatusOr<float> loss =
      mirrored.LossAndGradients(params, batch.x.data(), batch.y.data(), 301, &got);
  ASSERT_TRUE(loss.ok()) << loss.status();
  absl::StatusOr<float> want_loss =
      reference.LossAndGradients(params, batch.x.data(), batch.y.data(), 301, &want);
  EXPECT_NEAR(*loss, *want_loss, 1e-5f * (1 + *want_loss));
  ExpectParamsNear(got, want, 1e-4f);
  // Each virtual device holds its own buffers, within its own budget.
  for (Device* d : gpus->devices()) {
    const device::MemoryStats s = d->memory_stats();
    EXPECT_GT(s.bytes_in_use, 0) << d->name();
    EXPECT_LE(s.peak_bytes_reserved, s.bytes_limit) << d->name();
  }
}

// Prefetching on a GPU: batches staged from page-locked memory on the copy
// stream, each while the other slot's batch computes, give the gradients of
// the plain call.
TEST(CudaMlpTest, StagedFromPinnedMemory_WhileOtherSlotComputes_MatchUnstaged) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(2, "growth");
  ASSERT_NE(gpus, nullptr);
  const MlpConfig config = FashionMlp();
  std::mt19937 rng(10);
  const ParamSet params = RandomParams(config, &rng);
  MirroredMlp staged(config, gpus->devices());
  MirroredMlp plain(config, gpus->devices());
  constexpr int kMax = 512;
  device::HostBuffer x[2], y[2];
  for (int s = 0; s < 2; ++s) {
    x[s] = *gpus->device(0)->AllocateHost(sizeof(float) * kMax * config.input_dim);
    y[s] = *gpus->device(0)->AllocateHost(sizeof(int32_t) * kMax);
    ASSERT_NE(x[s].data(), nullptr);
  }
  std::vector<Batch> batches;
  for (int n : {512, 301, 64, 1}) batches.push_back(RandomBatch(config, n, &rng));
  auto stage = [&](size_t b) {
    const int slot = static_cast<int>(b % 2);
    std::copy(batches[b].x.begin(), batches[b].x.end(), x[slot].f32());
    std::copy(batches[b].y.begin(), batches[b].y.end(), y[slot].i32());
    return staged.Stage(slot, x[slot].f32(), y[slot].i32(), static_cast<int>(batches[b].y.size()));
  };
  ASSERT_TRUE(stage(0).ok());
  for (size_t b = 0; b < batches.size(); ++b) {
    SCOPED_TRACE(b);
    absl::Status next = absl::OkStatus();
    std::thread stager([&] {
      if (b + 1 < batches.size()) next = stage(b + 1);
    });
    ParamSet got, want;
    absl::StatusOr<float> loss = staged.LossAndGradientsStaged(static_cast<int>(b % 2), params,
                                                               &got);
    stager.join();
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE(next.ok()) << next;
    const int n = static_cast<int>(batches[b].y.size());
    absl::StatusOr<float> want_loss =
        plain.LossAndGradients(params, batches[b].x.data(), batches[b].y.data(), n, &want);
    ASSERT_TRUE(want_loss.ok());
    EXPECT_NEAR(*loss, *want_loss, 1e-6f * (1 + *want_loss));
    ExpectParamsNear(got, want, 1e-6f);
  }
}

// Wide & deep on a GPU against the CPU reference: gradients (row gradients
// summed with atomics, in another order) and predictions.
TEST(CudaWideDeepTest, TrainingStep_MatchesCpuWideDeep) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(2, "growth");
  ASSERT_NE(gpus, nullptr);
  const WideDeepConfig config;  // the Criteo defaults: 13 dense, 26 fields, dim 8
  std::mt19937 rng(11);
  const ParamSet params = wide_deep_testing::RandomParams(config, &rng, 0.1f);
  WideDeep reference(config);
  DeviceWideDeep one(config, gpus->device(0));
  MirroredWideDeep two(config, gpus->devices());
  for (int size : {512, 37}) {
    SCOPED_TRACE(size);
    const wide_deep_testing::RandomBatch batch(config, size, 700, &rng);
    ParamSet want, got_one, got_two;
    std::vector<float> want_deep, want_wide, deep_one, wide_one, deep_two, wide_two;
    absl::StatusOr<float> want_loss =
        reference.LossAndGradients(params, batch.View(), &want, &want_deep, &want_wide);
    absl::StatusOr<float> loss_one =
        one.LossAndGradients(params, batch.View(), &got_one, &deep_one, &wide_one);
    absl::StatusOr<float> loss_two =
        two.LossAndGradients(params, batch.View(), &got_two, &deep_two, &wide_two);
    ASSERT_TRUE(want_loss.ok() && loss_one.ok() && loss_two.ok()) << loss_one.status();
    EXPECT_NEAR(*loss_one, *want_loss, 1e-5f * (1 + *want_loss));
    EXPECT_NEAR(*loss_two, *want_loss, 1e-5f * (1 + *want_loss));
    ExpectParamsNear(got_one, want, 1e-4f);
    ExpectParamsNear(got_two, want, 1e-4f);
    ExpectParamsNear({deep_one, wide_one}, {want_deep, want_wide}, 1e-4f);
    ExpectParamsNear({deep_two, wide_two}, {want_deep, want_wide}, 1e-4f);
    std::vector<float> want_probs, got_probs;
    ASSERT_TRUE(reference.Predict(params, batch.View(), &want_probs).ok());
    ASSERT_TRUE(one.Predict(params, batch.View(), &got_probs).ok());
    ExpectNear(got_probs, want_probs, 1e-5f);
  }
}

TEST(CudaMemoryTest, BudgetTooSmallForWorkspace_CreateFailsResourceExhausted) {
  PST_SKIP_WITHOUT_GPU();
  absl::Status status;
  std::unique_ptr<DeviceSet> gpus = GpuDevices(1, "limit_mb:1", &status);
  EXPECT_EQ(gpus, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "--gpu_memory=limit_mb:1")) << status;
}

TEST(CudaMemoryTest, BatchOverBudget_ResourceExhaustedThenSmallerBatchWorks) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(1, "limit_mb:16");
  ASSERT_NE(gpus, nullptr);
  const MlpConfig config = FashionMlp();
  std::mt19937 rng(7);
  const ParamSet params = RandomParams(config, &rng);
  const Batch big = RandomBatch(config, 8192, &rng);  // 25 MiB of input alone
  DeviceMlp model(config, gpus->device(0));
  ParamSet grads;
  absl::StatusOr<float> r =
      model.LossAndGradients(params, big.x.data(), big.y.data(), 8192, &grads);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "GPU:0: out of memory")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "budget of 16.00 MiB")) << r.status();
  std::printf("the error: %s\n", r.status().ToString().c_str());
  const device::MemoryStats s = gpus->device(0)->memory_stats();
  EXPECT_LE(s.peak_bytes_reserved, s.bytes_limit);
  r = model.LossAndGradients(params, big.x.data(), big.y.data(), 256, &grads);
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST(CudaMemoryTest, Lifecycle_ModelDestroyed_AccountingBackToWorkspaceOnly) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(1, "growth");
  ASSERT_NE(gpus, nullptr);
  Device* gpu = gpus->device(0);
  const int64_t base = gpu->memory_stats().bytes_in_use;  // cuBLAS's workspace
  const MlpConfig config = FashionMlp();
  std::mt19937 rng(8);
  const ParamSet params = RandomParams(config, &rng);
  const Batch batch = RandomBatch(config, 512, &rng);
  {
    DeviceMlp model(config, gpu);
    ParamSet grads;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(model.LossAndGradients(params, batch.x.data(), batch.y.data(), 512, &grads).ok());
    }
    EXPECT_GT(gpu->memory_stats().bytes_in_use, base);
  }
  EXPECT_EQ(gpu->memory_stats().bytes_in_use, base);
  gpu->ReleaseCachedMemory();
  EXPECT_EQ(gpu->memory_stats().bytes_reserved, base);
  gpus.reset();  // destroys the devices and resets the GPU's context
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CudaTimingTest, DISABLED_Timing) {
  PST_SKIP_WITHOUT_GPU();
  std::unique_ptr<DeviceSet> gpus = GpuDevices(1, "growth");
  ASSERT_NE(gpus, nullptr);
  std::unique_ptr<Device> cpu = device::NewCpuDevice(0);
  std::mt19937 rng(9);
  Device* devices[2] = {cpu.get(), gpus->device(0)};
  const char* names[2] = {"CPU", "GPU"};
  for (int size : {1024, 4096}) {
    const std::vector<float> a = Random(static_cast<size_t>(size) * size, &rng);
    for (int d = 0; d < 2; ++d) {
      Device* dev = devices[d];
      DeviceBuffer da = Upload(dev, a), db = Upload(dev, a);
      DeviceBuffer dc = *dev->Allocate(a.size() * sizeof(float));
      ASSERT_TRUE(dev->Gemm(false, false, size, size, size, 1.0f, da.f32(), size, db.f32(), size,
                            0.0f, dc.f32(), size)
                      .ok());
      ASSERT_TRUE(dev->Synchronize().ok());
      const int reps = d == 0 ? 2 : 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) {
        ASSERT_TRUE(dev->Gemm(false, false, size, size, size, 1.0f, da.f32(), size, db.f32(), size,
                              0.0f, dc.f32(), size)
                        .ok());
      }
      ASSERT_TRUE(dev->Synchronize().ok());
      const double s = Seconds(t0) / reps;
      std::printf("TIMING sgemm %dx%dx%d on %s: %.3f ms, %.1f GFLOP/s\n", size, size, size,
                  names[d], s * 1e3, 2.0 * size * size * size / s / 1e9);
    }
  }
  const MlpConfig config = FashionMlp();
  const ParamSet params = RandomParams(config, &rng);
  for (int batch_size : {64, 256, 4096}) {
    const Batch batch = RandomBatch(config, batch_size, &rng);
    for (int d = 0; d < 2; ++d) {
      DeviceMlp model(config, devices[d]);
      ParamSet grads;
      ASSERT_TRUE(
          model.LossAndGradients(params, batch.x.data(), batch.y.data(), batch_size, &grads).ok());
      const int reps = 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) {
        ASSERT_TRUE(
            model.LossAndGradients(params, batch.x.data(), batch.y.data(), batch_size, &grads)
                .ok());
      }
      const double s = Seconds(t0) / reps;
      std::printf(
          "TIMING mlp 784-256-128-10 step (upload params+batch, fwd, bwd, download "
          "grads) batch %d on %s: %.3f ms, %.0f examples/s\n",
          batch_size, names[d], s * 1e3, batch_size / s);
    }
  }
  // The prefetching path as TrainMlp drives it on a GPU (batch b+1 staged
  // from page-locked memory by a background thread while batch b computes),
  // against the plain path of the same MirroredMlp on one device.
  for (int batch_size : {64, 4096}) {
    const Batch batch = RandomBatch(config, batch_size, &rng);
    MirroredMlp model(config, {gpus->device(0)});
    device::HostBuffer x[2], y[2];
    for (int s = 0; s < 2; ++s) {
      x[s] = *gpus->device(0)->AllocateHost(sizeof(float) * batch.x.size());
      y[s] = *gpus->device(0)->AllocateHost(sizeof(int32_t) * batch_size);
      std::copy(batch.x.begin(), batch.x.end(), x[s].f32());
      std::copy(batch.y.begin(), batch.y.end(), y[s].i32());
    }
    ParamSet grads;
    const int reps = 50;
    for (bool prefetch : {false, true}) {
      Background stager;
      absl::Status staged = model.Stage(0, x[0].f32(), y[0].i32(), batch_size);
      std::chrono::steady_clock::time_point t0;
      for (int r = 0; r <= reps; ++r) {
        if (r == 1) t0 = std::chrono::steady_clock::now();  // the first step warms up
        const int slot = r % 2;
        if (!prefetch) {
          ASSERT_TRUE(model.LossAndGradients(params, batch.x.data(), batch.y.data(), batch_size,
                                             &grads)
                          .ok());
          continue;
        }
        stager.Start([&, slot] {
          staged = model.Stage(slot ^ 1, x[slot ^ 1].f32(), y[slot ^ 1].i32(), batch_size);
        });
        ASSERT_TRUE(model.LossAndGradientsStaged(slot, params, &grads).ok());
        stager.Wait();
        ASSERT_TRUE(staged.ok()) << staged;
      }
      const double s = Seconds(t0) / reps;
      std::printf("TIMING mlp step, %s, batch %d on GPU: %.3f ms, %.0f examples/s\n",
                  prefetch ? "next batch prefetched (pinned memory, copy stream)"
                           : "batch copied in line (pageable memory)",
                  batch_size, s * 1e3, batch_size / s);
    }
  }
  const WideDeepConfig wd;
  const ParamSet wd_params = wide_deep_testing::RandomParams(wd, &rng, 0.1f);
  for (int batch_size : {512, 4096}) {
    const wide_deep_testing::RandomBatch batch(wd, batch_size, batch_size * 4, &rng);
    WideDeep host(wd);
    DeviceWideDeep gpu(wd, gpus->device(0));
    for (int d = 0; d < 2; ++d) {
      ParamSet grads;
      std::vector<float> deep, wide;
      auto step = [&] {
        return d == 0 ? host.LossAndGradients(wd_params, batch.View(), &grads, &deep, &wide)
                      : gpu.LossAndGradients(wd_params, batch.View(), &grads, &deep, &wide);
      };
      ASSERT_TRUE(step().ok());
      const int reps = 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) ASSERT_TRUE(step().ok());
      const double s = Seconds(t0) / reps;
      std::printf("TIMING wide&deep step (26 fields, dim 8, 64-32) batch %d on %s: %.3f ms, "
                  "%.0f examples/s\n",
                  batch_size, names[d], s * 1e3, batch_size / s);
    }
  }
}

}  // namespace
}  // namespace pst::models
