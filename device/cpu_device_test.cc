// CpuDevice's ops against naive loops.
#include "device/cpu_device.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace pst::device {
namespace {

std::vector<float> Random(size_t n, std::mt19937* rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// Device buffer holding a copy of `host`.
DeviceBuffer Upload(Device* d, const std::vector<float>& host) {
  DeviceBuffer b = *d->Allocate(host.size() * sizeof(float));
  EXPECT_TRUE(d->CopyToDevice(b.data(), host.data(), host.size() * sizeof(float)).ok());
  return b;
}
DeviceBuffer UploadInts(Device* d, const std::vector<int32_t>& host) {
  DeviceBuffer b = *d->Allocate(host.size() * sizeof(int32_t));
  EXPECT_TRUE(d->CopyToDevice(b.data(), host.data(), host.size() * sizeof(int32_t)).ok());
  return b;
}
std::vector<float> Download(Device* d, const DeviceBuffer& b, size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(d->CopyToHost(out.data(), b.data(), n * sizeof(float)).ok());
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::abs(want[i]))) << "at " << i;
  }
}

class CpuDeviceTest : public ::testing::Test {
 protected:
  std::unique_ptr<Device> device_ = NewCpuDevice(0);
  std::mt19937 rng_{42};
};

TEST_F(CpuDeviceTest, Gemm_AllTransposesAlphaBetaAndStrides_MatchNaive) {
  const int m = 7, n = 5, k = 9;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      // Stored shapes, with row strides 3 wider than needed.
      const int a_rows = ta ? k : m, a_cols = ta ? m : k;
      const int b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int lda = a_cols + 3, ldb = b_cols + 3, ldc = n + 3;
      const std::vector<float> a = Random(static_cast<size_t>(a_rows) * lda, &rng_);
      const std::vector<float> b = Random(static_cast<size_t>(b_rows) * ldb, &rng_);
      const std::vector<float> c0 = Random(static_cast<size_t>(m) * ldc, &rng_);
      const float alpha = 0.7f, beta = -1.3f;
      std::vector<float> want = c0;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p) {
            const float av = ta ? a[p * lda + i] : a[i * lda + p];
            const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
            s += static_cast<double>(av) * bv;
          }
          want[i * ldc + j] = static_cast<float>(alpha * s + beta * c0[i * ldc + j]);
        }
      }
      DeviceBuffer da = Upload(device_.get(), a), db = Upload(device_.get(), b),
                   dc = Upload(device_.get(), c0);
      ASSERT_TRUE(
          device_->Gemm(ta, tb, m, n, k, alpha, da.f32(), lda, db.f32(), ldb, beta, dc.f32(), ldc)
              .ok());
      ExpectNear(Download(device_.get(), dc, c0.size()), want, 1e-5f);
    }
  }
}

TEST_F(CpuDeviceTest, Gemm_StrideTooSmall_InvalidArgument) {
  DeviceBuffer buf = *device_->Allocate(1024);
  const absl::Status s =
      device_->Gemm(false, false, 2, 3, 4, 1.0f, buf.f32(), 3, buf.f32(), 3, 0.0f, buf.f32(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuDeviceTest, ElementwiseOps_MatchNaive) {
  const int rows = 6, cols = 11;
  const std::vector<float> x = Random(rows * cols, &rng_);
  const std::vector<float> bias = Random(cols, &rng_);
  std::vector<float> want = x;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want[r * cols + c] += bias[c];
  DeviceBuffer dx = Upload(device_.get(), x), dbias = Upload(device_.get(), bias);
  ASSERT_TRUE(device_->BiasAdd(rows, cols, dbias.f32(), dx.f32()).ok());
  ExpectNear(Download(device_.get(), dx, x.size()), want, 0);

  for (float& v : want) v = std::max(v, 0.0f);
  ASSERT_TRUE(device_->Relu(rows * cols, dx.f32()).ok());
  const std::vector<float> act = Download(device_.get(), dx, x.size());
  ExpectNear(act, want, 0);

  const std::vector<float> g = Random(rows * cols, &rng_);
  std::vector<float> want_g = g;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(act[i] > 0)) want_g[i] = 0;
  DeviceBuffer dg = Upload(device_.get(), g);
  ASSERT_TRUE(device_->ReluGrad(rows * cols, dx.f32(), dg.f32()).ok());
  ExpectNear(Download(device_.get(), dg, g.size()), want_g, 0);

  std::vector<float> want_sums(cols, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want_sums[c] += g[r * cols + c];
  DeviceBuffer dsums = *device_->Allocate(cols * sizeof(float));
  ASSERT_TRUE(device_->ColumnSums(rows, cols, Upload(device_.get(), g).f32(), dsums.f32()).ok());
  ExpectNear(Download(device_.get(), dsums, cols), want_sums, 1e-6f);

  ASSERT_TRUE(device_->Fill(rows * cols, 2.5f, dx.f32()).ok());
  ExpectNear(Download(device_.get(), dx, x.size()), std::vector<float>(rows * cols, 2.5f), 0);
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropy_MatchesNaive) {
  const int rows = 5, cols = 10;
  const std::vector<float> z = Random(rows * cols, &rng_, 3.0f);
  const std::vector<int32_t> labels = {0, 9, 3, 3, 7};
  const float scale = 0.25f;
  std::vector<float> want_loss(rows), want_d(rows * cols);
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(z[r * cols + c]));
    want_loss[r] = static_cast<float>(std::log(sum) - z[r * cols + labels[r]]);
    for (int c = 0; c < cols; ++c) {
      want_d[r * cols + c] = static_cast<float>(
          (std::exp(static_cast<double>(z[r * cols + c])) / sum - (c == labels[r] ? 1 : 0)) *
          scale);
    }
  }
  DeviceBuffer dz = Upload(device_.get(), z), dl = UploadInts(device_.get(), labels);
  DeviceBuffer loss = *device_->Allocate(rows * sizeof(float));
  DeviceBuffer dd = *device_->Allocate(rows * cols * sizeof(float));
  ASSERT_TRUE(
      device_->SoftmaxCrossEntropy(rows, cols, dz.f32(), dl.i32(), scale, loss.f32(), dd.f32())
          .ok());
  ExpectNear(Download(device_.get(), loss, rows), want_loss, 1e-5f);
  ExpectNear(Download(device_.get(), dd, rows * cols), want_d, 1e-5f);
}

TEST_F(CpuDeviceTest, SigmoidCrossEntropy_MatchesNaiveAndIsStableForLargeLogits) {
  const std::vector<float> z = {-50.0f, -3.0f, -0.5f, 0.0f, 0.5f, 3.0f, 50.0f};
  const std::vector<float> y = {0, 1, 0, 1, 1, 0, 1};
  const float scale = 0.5f;
  std::vector<float> want_loss, want_d;
  for (size_t i = 0; i < z.size(); ++i) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(z[i])));
    const double l =
        -(y[i] * std::log(std::max(p, 1e-300)) + (1 - y[i]) * std::log(std::max(1 - p, 1e-300)));
    want_loss.push_back(static_cast<float>(
        std::abs(z[i]) > 30 ? (z[i] > 0 ? (1 - y[i]) * z[i] : y[i] * -z[i]) : l));
    want_d.push_back(static_cast<float>((p - y[i]) * scale));
  }
  DeviceBuffer dz = Upload(device_.get(), z), dy = Upload(device_.get(), y);
  DeviceBuffer loss = *device_->Allocate(z.size() * sizeof(float));
  DeviceBuffer dd = *device_->Allocate(z.size() * sizeof(float));
  ASSERT_TRUE(
      device_->SigmoidCrossEntropy(z.size(), dz.f32(), dy.f32(), scale, loss.f32(), dd.f32()).ok());
  ExpectNear(Download(device_.get(), loss, z.size()), want_loss, 1e-5f);
  ExpectNear(Download(device_.get(), dd, z.size()), want_d, 1e-6f);
}

TEST_F(CpuDeviceTest, GatherAndScatterAdd_GroupedLayout_MatchNaive) {
  const int rows = 10, dim = 3, examples = 4, fields = 2, stride = fields * dim + 2;
  const std::vector<float> table = Random(rows * dim, &rng_);
  const std::vector<int32_t> index = {1, 4, 4, 9, 0, 1, 7, 4};  // repeats
  const int n = examples * fields;
  std::vector<float> want(examples * stride, -1.0f);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < dim; ++d)
      want[(j / fields) * stride + (j % fields) * dim + d] = table[index[j] * dim + d];
  DeviceBuffer dt = Upload(device_.get(), table), di = UploadInts(device_.get(), index);
  DeviceBuffer out = Upload(device_.get(), std::vector<float>(examples * stride, -1.0f));
  ASSERT_TRUE(device_->GatherRows(n, dim, dt.f32(), di.i32(), fields, stride, out.f32()).ok());
  ExpectNear(Download(device_.get(), out, want.size()), want, 0);

  const std::vector<float> grad = Random(examples * stride, &rng_);
  std::vector<float> want_t(rows * dim, 0.0f);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < dim; ++d)
      want_t[index[j] * dim + d] += grad[(j / fields) * stride + (j % fields) * dim + d];
  DeviceBuffer dgrad = Upload(device_.get(), grad);
  DeviceBuffer acc = Upload(device_.get(), std::vector<float>(rows * dim, 0.0f));
  ASSERT_TRUE(
      device_->ScatterAddRows(n, dim, dgrad.f32(), fields, stride, di.i32(), acc.f32()).ok());
  ExpectNear(Download(device_.get(), acc, want_t.size()), want_t, 1e-6f);

  EXPECT_EQ(device_->GatherRows(n, dim, dt.f32(), di.i32(), fields, dim, out.f32()).code(),
            absl::StatusCode::kInvalidArgument);  // stride < fields * dim
}

TEST_F(CpuDeviceTest, Allocate_OverBudget_ResourceExhausted) {
  std::unique_ptr<Device> small = NewCpuDevice(1, 1 << 20);
  absl::StatusOr<DeviceBuffer> ok = small->Allocate(512 << 10);
  ASSERT_TRUE(ok.ok());
  absl::StatusOr<DeviceBuffer> too_much = small->Allocate(768 << 10);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.status().code(), absl::StatusCode::kResourceExhausted);
  ok->Reset();
  EXPECT_EQ(small->memory_stats().bytes_in_use, 0);
}

}  // namespace
}  // namespace pst::device
