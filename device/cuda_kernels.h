// Launchers for the CUDA Device's own kernels (cuda_kernels.cu). Each
// queues its kernel on `stream` and returns the launch's error
// (cudaGetLastError); the semantics are those of the Device method of the
// same name (device.h). Kept free of absl so that only this one small file
// goes through nvcc.
#ifndef PST_DEVICE_CUDA_KERNELS_H_
#define PST_DEVICE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pst::device::cuda {

cudaError_t BiasAdd(int rows, int cols, const float* bias, float* x, cudaStream_t stream);
cudaError_t Relu(int64_t n, float* x, cudaStream_t stream);
cudaError_t ReluGrad(int64_t n, const float* act, float* grad, cudaStream_t stream);
cudaError_t ColumnSums(int rows, int cols, const float* x, float* out, cudaStream_t stream);
cudaError_t SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                float grad_scale, float* loss, float* dlogits, cudaStream_t stream);
cudaError_t SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                float grad_scale, float* loss, float* dlogits, cudaStream_t stream);
cudaError_t GatherRows(int n, int dim, const float* table, const int32_t* index, int group,
                       int out_stride, float* out, cudaStream_t stream);
cudaError_t ScatterAddRows(int n, int dim, const float* grad, int group, int grad_stride,
                           const int32_t* index, float* table, cudaStream_t stream);
cudaError_t Fill(int64_t n, float value, float* x, cudaStream_t stream);

}  // namespace pst::device::cuda

#endif  // PST_DEVICE_CUDA_KERNELS_H_
