#include "device/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "device/cuda_kernels.h"

namespace pst::device {
namespace {

// cuBLAS's workspace, taken from the device's own budget (cuBLAS would
// otherwise cudaMalloc one behind the allocator's back).
constexpr size_t kCublasWorkspaceBytes = size_t{4} << 20;

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
      err == cudaErrorInvalidDevice) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

#define PST_CUDA_RETURN(expr, what) PST_RETURN_IF_ERROR(CudaStatus((expr), (what)))

// cuBLAS, loaded on first use so that binaries start without it.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  absl::Status load_status;

  static const Cublas& Get() {
    static const Cublas* cublas = new Cublas(Load());
    return *cublas;
  }

  std::string StatusText(cublasStatus_t s) const {
    return status_string != nullptr ? status_string(s) : absl::StrCat("cuBLAS status ", s);
  }

 private:
  static Cublas Load() {
    Cublas c;
    const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
    std::string tried = soname;
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef PST_CUDA_LIBRARY_DIR
    if (lib == nullptr) {
      const std::string path = absl::StrCat(PST_CUDA_LIBRARY_DIR, "/", soname);
      absl::StrAppend(&tried, ", ", path);
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (lib == nullptr) {
      const char* err = dlerror();
      c.load_status = absl::FailedPreconditionError(
          absl::StrCat("cuBLAS not found (tried ", tried, "): ", err != nullptr ? err : "?"));
      return c;
    }
    auto sym = [&](const char* name, auto* fn) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr && c.load_status.ok()) {
        c.load_status =
            absl::FailedPreconditionError(absl::StrCat(soname, " has no symbol ", name));
      }
    };
    sym("cublasCreate_v2", &c.create);
    sym("cublasDestroy_v2", &c.destroy);
    sym("cublasSetStream_v2", &c.set_stream);
    sym("cublasSetWorkspace_v2", &c.set_workspace);
    sym("cublasSgemm_v2", &c.sgemm);
    c.status_string =
        reinterpret_cast<decltype(&cublasGetStatusString)>(dlsym(lib, "cublasGetStatusString"));
    return c;
  }
};

void FreePinned(void* p) { (void)cudaFreeHost(p); }

class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int ordinal) : ordinal_(ordinal) {}

  absl::StatusOr<void*> Alloc(size_t bytes) override {
    PST_CUDA_RETURN(cudaSetDevice(ordinal_), "cudaSetDevice");
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
      return CudaStatus(err, absl::StrCat("cudaMalloc(", bytes, ")"));
    }
    return p;
  }

  void Free(void* ptr, size_t) override {
    if (cudaSetDevice(ordinal_) == cudaSuccess) (void)cudaFree(ptr);
  }

 private:
  const int ordinal_;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(const LogicalDeviceSpec& spec, int ordinal)
      : Device(spec.name(), DeviceType::kGpu,
               std::make_unique<CachingAllocator>(spec.name(),
                                                  std::make_unique<CudaRawAllocator>(ordinal),
                                                  spec.memory_limit, spec.budget_source)),
        ordinal_(ordinal) {}

  ~CudaDevice() override {
    if (cudaSetDevice(ordinal_) == cudaSuccess) {
      if (copy_stream_ != nullptr) (void)cudaStreamSynchronize(copy_stream_);
      if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
      if (handle_ != nullptr) Cublas::Get().destroy(handle_);
      for (cudaEvent_t event : copies_done_) {
        if (event != nullptr) (void)cudaEventDestroy(event);
      }
      if (copy_stream_ != nullptr) (void)cudaStreamDestroy(copy_stream_);
      if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    }
    workspace_.Reset();
    ReleaseCachedMemory();
  }

  absl::Status Init() {
    const Cublas& cublas = Cublas::Get();
    PST_RETURN_IF_ERROR(cublas.load_status);
    PST_CUDA_RETURN(cudaSetDevice(ordinal_), absl::StrCat(name(), ": cudaSetDevice"));
    PST_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                    absl::StrCat(name(), ": cudaStreamCreate"));
    PST_CUDA_RETURN(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking),
                    absl::StrCat(name(), ": cudaStreamCreate(copies)"));
    for (cudaEvent_t& event : copies_done_) {
      PST_CUDA_RETURN(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                      absl::StrCat(name(), ": cudaEventCreate"));
    }
    PST_ASSIGN_OR_RETURN(workspace_, Allocate(kCublasWorkspaceBytes));
    PST_RETURN_IF_ERROR(BlasStatus(cublas.create(&handle_), "cublasCreate"));
    PST_RETURN_IF_ERROR(BlasStatus(cublas.set_stream(handle_, stream_), "cublasSetStream"));
    PST_RETURN_IF_ERROR(
        BlasStatus(cublas.set_workspace(handle_, workspace_.data(), workspace_.bytes()),
                   "cublasSetWorkspace"));
    return absl::OkStatus();
  }

  absl::Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    PST_RETURN_IF_ERROR(Enter());
    return Check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync(host to device)");
  }

  absl::Status CopyToHost(void* host, const void* device, size_t bytes) override {
    PST_RETURN_IF_ERROR(Enter());
    if (bytes > 0) {
      PST_RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                "cudaMemcpyAsync(device to host)"));
    }
    return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::Status CopyToHostAsync(void* host, const void* device, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    PST_RETURN_IF_ERROR(Enter());
    return Check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync(device to host, queued)");
  }

  absl::Status Synchronize() override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) override {
    PST_RETURN_IF_ERROR(Enter());
    void* p = nullptr;
    // Portable: page-locked for every device's context, so one staging
    // buffer can feed several logical devices.
    const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaStatus(err, absl::StrCat(name(), ": cudaHostAlloc(", bytes, ")"));
    }
    return HostBuffer(p, bytes, &FreePinned);
  }

  absl::Status CopyToDeviceAsync(void* device, const void* host, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    PST_RETURN_IF_ERROR(Enter());
    return Check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, copy_stream_),
                 "cudaMemcpyAsync(host to device, copy stream)");
  }

  absl::Status RecordCopies(int slot) override {
    PST_RETURN_IF_ERROR(CheckCopySlot(slot));
    PST_RETURN_IF_ERROR(Enter());
    return Check(cudaEventRecord(copies_done_[slot], copy_stream_), "cudaEventRecord");
  }

  absl::Status WaitForCopies(int slot) override {
    PST_RETURN_IF_ERROR(CheckCopySlot(slot));
    PST_RETURN_IF_ERROR(Enter());
    return Check(cudaStreamWaitEvent(stream_, copies_done_[slot], 0), "cudaStreamWaitEvent");
  }

  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) override {
    PST_RETURN_IF_ERROR(CheckGemmArgs(trans_a, trans_b, m, n, k, lda, ldb, ldc));
    if (m == 0 || n == 0) return absl::OkStatus();
    PST_RETURN_IF_ERROR(Enter());
    // cuBLAS is column-major: a row-major [r, c] matrix is its column-major
    // transpose. So C^T = op(B)^T * op(A)^T, i.e. swap the operands and
    // pass the sizes as (n, m).
    return BlasStatus(Cublas::Get().sgemm(handle_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                          ldb, a, lda, &beta, c, ldc),
                      "cublasSgemm");
  }

  absl::Status BiasAdd(int rows, int cols, const float* bias, float* x) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::BiasAdd(rows, cols, bias, x, stream_), "BiasAdd");
  }
  absl::Status Relu(int64_t n, float* x) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::Relu(n, x, stream_), "Relu");
  }
  absl::Status ReluGrad(int64_t n, const float* act, float* grad) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::ReluGrad(n, act, grad, stream_), "ReluGrad");
  }
  absl::Status ColumnSums(int rows, int cols, const float* x, float* out) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::ColumnSums(rows, cols, x, out, stream_), "ColumnSums");
  }
  absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                   float grad_scale, float* loss, float* dlogits) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(
        cuda::SoftmaxCrossEntropy(rows, cols, logits, labels, grad_scale, loss, dlogits, stream_),
        "SoftmaxCrossEntropy");
  }
  absl::Status SigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                   float grad_scale, float* loss, float* dlogits) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::SigmoidCrossEntropy(n, logits, labels, grad_scale, loss, dlogits, stream_),
                 "SigmoidCrossEntropy");
  }
  absl::Status GatherRows(int n, int dim, const float* table, const int32_t* index, int group,
                          int out_stride, float* out) override {
    PST_RETURN_IF_ERROR(CheckGatherArgs("GatherRows", n, dim, group, out_stride));
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::GatherRows(n, dim, table, index, group, out_stride, out, stream_),
                 "GatherRows");
  }
  absl::Status ScatterAddRows(int n, int dim, const float* grad, int group, int grad_stride,
                              const int32_t* index, float* table) override {
    PST_RETURN_IF_ERROR(CheckGatherArgs("ScatterAddRows", n, dim, group, grad_stride));
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::ScatterAddRows(n, dim, grad, group, grad_stride, index, table, stream_),
                 "ScatterAddRows");
  }
  absl::Status Fill(int64_t n, float value, float* x) override {
    PST_RETURN_IF_ERROR(Enter());
    return Check(cuda::Fill(n, value, x, stream_), "Fill");
  }

 private:
  // Makes this device current for the calling thread.
  absl::Status Enter() { return Check(cudaSetDevice(ordinal_), "cudaSetDevice"); }

  absl::Status Check(cudaError_t err, absl::string_view what) const {
    return CudaStatus(err, absl::StrCat(name(), ": ", what));
  }

  absl::Status BlasStatus(cublasStatus_t s, absl::string_view what) const {
    if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    const std::string message = absl::StrCat(name(), ": ", what, ": ", Cublas::Get().StatusText(s));
    if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
    return absl::InternalError(message);
  }

  const int ordinal_;
  cudaStream_t stream_ = nullptr;       // math and the plain copies
  cudaStream_t copy_stream_ = nullptr;  // CopyToDeviceAsync
  cudaEvent_t copies_done_[kCopySlots] = {};  // per slot, recorded on copy_stream_
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

std::string UuidText(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppendFormat(&out, "%02x", b[i]);
  }
  return out;
}

}  // namespace

bool CudaBackendBuilt() { return true; }

absl::StatusOr<std::vector<GpuInfo>> ListCudaRuntimeGpus() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("CUDA runtime: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    PST_CUDA_RETURN(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    GpuInfo gpu;
    gpu.index = i;
    gpu.name = prop.name;
    gpu.pci_bus_id =
        absl::StrFormat("%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    gpu.uuid = UuidText(prop.uuid);
    gpu.cc_major = prop.major;
    gpu.cc_minor = prop.minor;
    gpu.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice(const LogicalDeviceSpec& spec) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return CudaStatus(err, absl::StrCat(spec.name(), ": no usable GPU"));
  }
  int ordinal = -1;
  err = cudaDeviceGetByPCIBusId(&ordinal, spec.gpu.pci_bus_id.c_str());
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat(spec.name(), ": GPU ", spec.gpu.index, " (pci bus id ", spec.gpu.pci_bus_id,
                     ") is not visible to CUDA: ", cudaGetErrorString(err)));
  }
  auto device = std::make_unique<CudaDevice>(spec, ordinal);
  PST_RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

absl::Status ResetCudaGpu(const std::string& pci_bus_id) {
  int ordinal = -1;
  PST_CUDA_RETURN(cudaDeviceGetByPCIBusId(&ordinal, pci_bus_id.c_str()),
                  absl::StrCat("cudaDeviceGetByPCIBusId(", pci_bus_id, ")"));
  PST_CUDA_RETURN(cudaSetDevice(ordinal), "cudaSetDevice");
  PST_CUDA_RETURN(cudaDeviceReset(), absl::StrCat("cudaDeviceReset(", pci_bus_id, ")"));
  return absl::OkStatus();
}

}  // namespace pst::device
