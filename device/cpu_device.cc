#include "device/cpu_device.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::device {
namespace {

class CpuDevice final : public Device {
 public:
  CpuDevice(int index, std::unique_ptr<RawAllocator> raw, int64_t budget)
      : Device(absl::StrCat("CPU:", index), DeviceType::kCpu,
               std::make_unique<CachingAllocator>(
                   absl::StrCat("CPU:", index), std::move(raw), budget,
                   budget == kUnlimitedBudget ? "no limit"
                                              : absl::StrCat("limit ", budget, " bytes"))) {}

  absl::Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* host, const void* device, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) override {
    PST_RETURN_IF_ERROR(CheckGemmArgs(trans_a, trans_b, m, n, k, lda, ldb, ldc));
    if (m == 0 || n == 0) return absl::OkStatus();
    if (k == 0) {
      // C = beta * C (BLAS leaves this case to the caller in some builds).
      for (int r = 0; r < m; ++r) {
        float* row = c + static_cast<size_t>(r) * ldc;
        for (int j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
      }
      return absl::OkStatus();
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return absl::OkStatus();
  }

  absl::Status BiasAdd(int rows, int cols, const float* bias, float* x) override {
    for (int r = 0; r < rows; ++r) {
      float* row = x + static_cast<size_t>(r) * cols;
      for (int j = 0; j < cols; ++j) row[j] += bias[j];
    }
    return absl::OkStatus();
  }

  absl::Status Relu(int64_t n, float* x) override {
    for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.0f);
    return absl::OkStatus();
  }

  absl::Status ReluGrad(int64_t n, const float* act, float* grad) override {
    for (int64_t i = 0; i < n; ++i) {
      if (!(act[i] > 0.0f)) grad[i] = 0.0f;
    }
    return absl::OkStatus();
  }

  absl::Status ColumnSums(int rows, int cols, const float* x, float* out) override {
    std::fill(out, out + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<size_t>(r) * cols;
      for (int j = 0; j < cols; ++j) out[j] += row[j];
    }
    return absl::OkStatus();
  }

  absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                   float grad_scale, float* loss, float* dlogits) override {
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<size_t>(r) * cols;
      float* p = dlogits + static_cast<size_t>(r) * cols;
      const float max = *std::max_element(z, z + cols);
      double sum = 0;
      for (int j = 0; j < cols; ++j) {
        p[j] = std::exp(z[j] - max);
        sum += p[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int j = 0; j < cols; ++j) p[j] *= inv;
      loss[r] = static_cast<float>(std::log(sum) + static_cast<double>(max) -
                                   static_cast<double>(z[labels[r]]));
      p[labels[r]] -= 1.0f;
      for (int j = 0; j < cols; ++j) p[j] *= grad_scale;
    }
    return absl::OkStatus();
  }

  absl::Status SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                   float grad_scale, float* loss, float* dlogits) override {
    for (int64_t i = 0; i < n; ++i) {
      const float z = logits[i];
      const float y = labels[i];
      loss[i] = std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::abs(z)));
      const float s = z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
      dlogits[i] = (s - y) * grad_scale;
    }
    return absl::OkStatus();
  }

  absl::Status GatherRows(int n, int dim, const float* table, const int32_t* index, int group,
                          int out_stride, float* out) override {
    PST_RETURN_IF_ERROR(CheckGatherArgs("GatherRows", n, dim, group, out_stride));
    for (int j = 0; j < n; ++j) {
      float* dst =
          out + static_cast<size_t>(j / group) * out_stride + static_cast<size_t>(j % group) * dim;
      std::memcpy(dst, table + static_cast<size_t>(index[j]) * dim, sizeof(float) * dim);
    }
    return absl::OkStatus();
  }

  absl::Status ScatterAddRows(int n, int dim, const float* grad, int group, int grad_stride,
                              const int32_t* index, float* table) override {
    PST_RETURN_IF_ERROR(CheckGatherArgs("ScatterAddRows", n, dim, group, grad_stride));
    for (int j = 0; j < n; ++j) {
      const float* src = grad + static_cast<size_t>(j / group) * grad_stride +
                         static_cast<size_t>(j % group) * dim;
      float* dst = table + static_cast<size_t>(index[j]) * dim;
      for (int d = 0; d < dim; ++d) dst[d] += src[d];
    }
    return absl::OkStatus();
  }

  absl::Status Fill(int64_t n, float value, float* x) override {
    std::fill(x, x + n, value);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Device> NewCpuDevice(int index, int64_t budget_bytes) {
  return NewCpuDevice(index, NewHostRawAllocator(), budget_bytes);
}

std::unique_ptr<Device> NewCpuDevice(int index, std::unique_ptr<RawAllocator> raw,
                                     int64_t budget_bytes) {
  return std::make_unique<CpuDevice>(index, std::move(raw), budget_bytes);
}

}  // namespace pst::device
