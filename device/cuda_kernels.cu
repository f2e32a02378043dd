// The CUDA Device's own kernels. Simple, memory-bound and deterministic
// (except ScatterAddRows, whose atomics sum repeated rows in any order).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "device/cuda_kernels.h"

namespace pst::device::cuda {
namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 8)));
}

__global__ void BiasAddKernel(int64_t n, int cols, const float* __restrict__ bias,
                              float* __restrict__ x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] += bias[i % cols];
  }
}

__global__ void ReluKernel(int64_t n, float* __restrict__ x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = fmaxf(x[i], 0.0f);
  }
}

__global__ void ReluGradKernel(int64_t n, const float* __restrict__ act, float* __restrict__ grad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!(act[i] > 0.0f)) grad[i] = 0.0f;
  }
}

// Block (32, 32): threadIdx.x picks a column of the block's 32, threadIdx.y
// strides over the rows; the 32 partial sums of a column are then added in
// a fixed order, so the result is deterministic.
__global__ void ColumnSumsKernel(int rows, int cols, const float* __restrict__ x,
                                 float* __restrict__ out) {
  __shared__ float partial[32][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int r = threadIdx.y; r < rows; r += 32) sum += x[static_cast<int64_t>(r) * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < 32; ++k) total += partial[k][threadIdx.x];
    out[col] = total;
  }
}

__device__ float WarpMax(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ float WarpSum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// One warp per row.
__global__ void SoftmaxXentKernel(int rows, int cols, const float* __restrict__ logits,
                                  const int32_t* __restrict__ labels, float grad_scale,
                                  float* __restrict__ loss, float* __restrict__ dlogits) {
  const int warps_per_block = blockDim.x / 32;
  const int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* z = logits + static_cast<int64_t>(row) * cols;
  float* p = dlogits + static_cast<int64_t>(row) * cols;
  float max = -INFINITY;
  for (int j = lane; j < cols; j += 32) max = fmaxf(max, z[j]);
  max = WarpMax(max);
  float sum = 0.0f;
  for (int j = lane; j < cols; j += 32) {
    const float e = expf(z[j] - max);
    p[j] = e;
    sum += e;
  }
  sum = WarpSum(sum);
  const int label = labels[row];
  const float inv = 1.0f / sum;
  for (int j = lane; j < cols; j += 32) {
    p[j] = (p[j] * inv - (j == label ? 1.0f : 0.0f)) * grad_scale;
  }
  if (lane == 0) loss[row] = logf(sum) + max - z[label];
}

__global__ void SigmoidXentKernel(int64_t n, const float* __restrict__ logits,
                                  const float* __restrict__ labels, float grad_scale,
                                  float* __restrict__ loss, float* __restrict__ dlogits) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float z = logits[i];
    const float y = labels[i];
    loss[i] = fmaxf(z, 0.0f) - z * y + log1pf(expf(-fabsf(z)));
    const float s = z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
    dlogits[i] = (s - y) * grad_scale;
  }
}

// One thread per (row, element); consecutive threads walk one row.
__global__ void GatherRowsKernel(int64_t total, int dim, const float* __restrict__ table,
                                 const int32_t* __restrict__ index, int group, int out_stride,
                                 float* __restrict__ out) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = t / dim;
    const int d = static_cast<int>(t % dim);
    out[(j / group) * out_stride + (j % group) * dim + d] =
        table[static_cast<int64_t>(index[j]) * dim + d];
  }
}

__global__ void ScatterAddRowsKernel(int64_t total, int dim, const float* __restrict__ grad,
                                     int group, int grad_stride, const int32_t* __restrict__ index,
                                     float* table) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = t / dim;
    const int d = static_cast<int>(t % dim);
    atomicAdd(&table[static_cast<int64_t>(index[j]) * dim + d],
              grad[(j / group) * grad_stride + (j % group) * dim + d]);
  }
}

__global__ void FillKernel(int64_t n, float value, float* __restrict__ x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

}  // namespace

cudaError_t BiasAdd(int rows, int cols, const float* bias, float* x, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  BiasAddKernel<<<GridFor(n), kThreads, 0, stream>>>(n, cols, bias, x);
  return cudaGetLastError();
}

cudaError_t Relu(int64_t n, float* x, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluKernel<<<GridFor(n), kThreads, 0, stream>>>(n, x);
  return cudaGetLastError();
}

cudaError_t ReluGrad(int64_t n, const float* act, float* grad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluGradKernel<<<GridFor(n), kThreads, 0, stream>>>(n, act, grad);
  return cudaGetLastError();
}

cudaError_t ColumnSums(int rows, int cols, const float* x, float* out, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  ColumnSumsKernel<<<(cols + 31) / 32, dim3(32, 32), 0, stream>>>(rows, cols, x, out);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                float grad_scale, float* loss, float* dlogits,
                                cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kWarps = kThreads / 32;
  SoftmaxXentKernel<<<(rows + kWarps - 1) / kWarps, kThreads, 0, stream>>>(
      rows, cols, logits, labels, grad_scale, loss, dlogits);
  return cudaGetLastError();
}

cudaError_t SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                float grad_scale, float* loss, float* dlogits,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SigmoidXentKernel<<<GridFor(n), kThreads, 0, stream>>>(n, logits, labels, grad_scale, loss,
                                                         dlogits);
  return cudaGetLastError();
}

cudaError_t GatherRows(int n, int dim, const float* table, const int32_t* index, int group,
                       int out_stride, float* out, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (total == 0) return cudaSuccess;
  GatherRowsKernel<<<GridFor(total), kThreads, 0, stream>>>(total, dim, table, index, group,
                                                            out_stride, out);
  return cudaGetLastError();
}

cudaError_t ScatterAddRows(int n, int dim, const float* grad, int group, int grad_stride,
                           const int32_t* index, float* table, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (total == 0) return cudaSuccess;
  ScatterAddRowsKernel<<<GridFor(total), kThreads, 0, stream>>>(total, dim, grad, group,
                                                                grad_stride, index, table);
  return cudaGetLastError();
}

cudaError_t Fill(int64_t n, float value, float* x, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<GridFor(n), kThreads, 0, stream>>>(n, value, x);
  return cudaGetLastError();
}

}  // namespace pst::device::cuda
