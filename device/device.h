// A compute device for the models' math: memory with accounting, copies
// between host and device, and the few kernels an MLP or a wide & deep model
// needs (GEMM, bias-add, ReLU, losses, embedding gather and scatter-add).
//
// Two implementations: the CPU one (cpu_device.h, OpenBLAS), which is the
// reference, and the CUDA one (cuda_device.h, cuBLAS plus our own kernels),
// built only where a CUDA compiler was found. Models are written once against
// this interface.
//
// Conventions, for every method:
//   - matrices are row-major float32; pointers named for data on the device
//     point into DeviceBuffers of this same device;
//   - work is queued in order on the device's one stream: a method may return
//     before its kernels have run. CopyToHost and Synchronize wait for every
//     earlier call, so an asynchronous kernel failure surfaces there at the
//     latest (as Internal). Argument checks happen at the call;
//   - REQUIRES: indices and labels in range (checked by the callers, the
//     kernels do not check them).
//
// Thread-safety: a Device may be used by one thread at a time for its math
// and copies; Allocate, buffers' destruction and memory_stats are safe from
// any thread (the allocator has its own lock). Several Devices, even on one
// GPU, may be driven by different threads concurrently.
#ifndef PST_DEVICE_DEVICE_H_
#define PST_DEVICE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device_allocator.h"

namespace pst::device {

enum class DeviceType { kCpu, kGpu };

class Device;

// Host memory for staging transfers (Device::AllocateHost): page-locked on a
// GPU, so that a copy from it runs as DMA beside the device's compute.
// Move-only; frees itself.
class HostBuffer {
 public:
  using FreeFn = void (*)(void*);
  HostBuffer() = default;
  HostBuffer(void* ptr, size_t bytes, FreeFn free_fn) : ptr_(ptr, free_fn), bytes_(bytes) {}

  void* data() const { return ptr_.get(); }
  float* f32() const { return static_cast<float*>(ptr_.get()); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_.get()); }
  size_t bytes() const { return ptr_ == nullptr ? 0 : bytes_; }

 private:
  std::unique_ptr<void, FreeFn> ptr_{nullptr, nullptr};
  size_t bytes_ = 0;
};

// A block of one device's memory, returned to that device's allocator when
// destroyed. Move-only.
// REQUIRES: destroyed (or Reset) before the Device that made it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void Reset();
  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  friend class Device;
  DeviceBuffer(CachingAllocator* allocator, void* ptr, size_t bytes)
      : allocator_(allocator), ptr_(ptr), bytes_(bytes) {}

  CachingAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // "CPU:0", "GPU:1": the logical device, as TensorFlow names it.
  const std::string& name() const { return name_; }
  DeviceType type() const { return type_; }

  // ---- Memory.
  // A buffer of at least `bytes` bytes (contents undefined).
  // Errors: ResourceExhausted when the device's memory budget (or the device
  // itself) cannot hold it; the message names the budget, the bytes in use
  // and the request.
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  // Grows `buffer` to hold at least `bytes` bytes; keeps it if it already
  // does (contents are not preserved on growth). Errors as Allocate.
  absl::Status EnsureCapacity(DeviceBuffer* buffer, size_t bytes);
  MemoryStats memory_stats() const { return allocator_->stats(); }
  // Returns the allocator's cached free blocks to the system.
  void ReleaseCachedMemory() { allocator_->ReleaseCached(); }

  // ---- Copies. `device` pointers are this device's memory.
  virtual absl::Status CopyToDevice(void* device, const void* host, size_t bytes) = 0;
  // Waits for all queued work, then copies; `host` is ready on return.
  virtual absl::Status CopyToHost(void* host, const void* device, size_t bytes) = 0;
  // Queues a copy to the host behind the work queued before it, without
  // waiting: `host` holds the data once Synchronize (or CopyToHost) has
  // returned, and must not be read before. Fastest into AllocateHost
  // memory; on the CPU (the default here) it copies at once.
  virtual absl::Status CopyToHostAsync(void* host, const void* device, size_t bytes);
  // Waits for all queued work.
  virtual absl::Status Synchronize() = 0;

  // ---- Copies that overlap compute (prefetching the next batch).
  // Host memory of at least `bytes` bytes that copies run fastest from:
  // page-locked on a GPU, ordinary (64-byte aligned) memory on the CPU.
  // Not counted in the device's budget. Errors: ResourceExhausted.
  virtual absl::StatusOr<HostBuffer> AllocateHost(size_t bytes);
  // Queues a host-to-device copy beside the math: on a GPU it runs on a
  // copy stream of its own, concurrently with kernels queued before it.
  // After the copies of one staging slot (kCopySlots of them) are queued,
  // RecordCopies(slot) marks them; math queued after WaitForCopies(slot)
  // sees their data. `host` must stay unchanged until that math has been
  // waited for (CopyToHost, Synchronize). The CPU copies at once.
  //
  // Unlike the other methods, CopyToDeviceAsync and RecordCopies may run on
  // a second thread while a first drives the device's math, provided the two
  // never touch the same memory or slot.
  virtual absl::Status CopyToDeviceAsync(void* device, const void* host, size_t bytes);
  static constexpr int kCopySlots = 2;
  // REQUIRES: 0 <= slot < kCopySlots (also for WaitForCopies).
  virtual absl::Status RecordCopies(int slot);
  // Orders all math queued after it behind the copies RecordCopies(slot)
  // marked, without blocking the host.
  virtual absl::Status WaitForCopies(int slot);

  // ---- Math (row-major).
  // C[m,n] = alpha * op(A) * op(B) + beta * C, where op(A) is [m,k] (A is
  // stored [k,m] when trans_a) and op(B) is [k,n] (B stored [n,k] when
  // trans_b); lda, ldb, ldc are the row strides of A, B and C as stored.
  // Errors: InvalidArgument for negative sizes or strides too small.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc) = 0;
  // x[r, c] += bias[c] for x [rows, cols].
  virtual absl::Status BiasAdd(int rows, int cols, const float* bias, float* x) = 0;
  // x[i] = max(x[i], 0), in place.
  virtual absl::Status Relu(int64_t n, float* x) = 0;
  // grad[i] = 0 where act[i] <= 0 (act: the ReLU's output), in place.
  virtual absl::Status ReluGrad(int64_t n, const float* act, float* grad) = 0;
  // out[c] = sum_r x[r, c] for x [rows, cols] (a bias gradient).
  virtual absl::Status ColumnSums(int rows, int cols, const float* x, float* out) = 0;
  // Softmax cross-entropy per row of `logits` [rows, cols]:
  //   loss[r] = logsumexp(z_r) - z_r[labels[r]]
  //   dlogits[r, :] = (softmax(z_r) - onehot(labels[r])) * grad_scale
  // REQUIRES: 0 <= labels[r] < cols.
  virtual absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                           const int32_t* labels, float grad_scale, float* loss,
                                           float* dlogits) = 0;
  // Sigmoid cross-entropy per element:
  //   loss[i] = max(z, 0) - z * y + log(1 + exp(-|z|))
  //   dlogits[i] = (sigmoid(z) - y) * grad_scale
  virtual absl::Status SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                           float grad_scale, float* loss, float* dlogits) = 0;
  // Embedding gather: for j in [0, n), row index[j] of `table` [*, dim] goes
  // to out + (j / group) * out_stride + (j % group) * dim. With group = 1 and
  // out_stride = dim the output is [n, dim]; with group = F fields and
  // out_stride >= F * dim each output row holds one example's F embeddings.
  // REQUIRES: index[j] is a row of `table`.
  virtual absl::Status GatherRows(int n, int dim, const float* table, const int32_t* index,
                                  int group, int out_stride, float* out) = 0;
  // The gather's gradient: table[index[j], :] += the `dim` values at
  // grad + (j / group) * grad_stride + (j % group) * dim. Repeated indices
  // accumulate (in an unspecified order on a GPU).
  virtual absl::Status ScatterAddRows(int n, int dim, const float* grad, int group, int grad_stride,
                                      const int32_t* index, float* table) = 0;
  // x[i] = value.
  virtual absl::Status Fill(int64_t n, float value, float* x) = 0;

 protected:
  Device(std::string name, DeviceType type, std::unique_ptr<CachingAllocator> allocator);
  CachingAllocator* allocator() const { return allocator_.get(); }
  // InvalidArgument unless 0 <= slot < kCopySlots.
  absl::Status CheckCopySlot(int slot) const;

 private:
  const std::string name_;
  const DeviceType type_;
  std::unique_ptr<CachingAllocator> allocator_;
};

// Shared argument checks for implementations. InvalidArgument names `op`.
absl::Status CheckGemmArgs(bool trans_a, bool trans_b, int m, int n, int k, int lda, int ldb,
                           int ldc);
absl::Status CheckGatherArgs(const char* op, int n, int dim, int group, int stride);

}  // namespace pst::device

#endif  // PST_DEVICE_DEVICE_H_
