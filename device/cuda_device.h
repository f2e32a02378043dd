// The CUDA Device: cuBLAS for GEMM, our own kernels (cuda_kernels.cu) for
// the rest, one non-blocking stream for the math and a second one for the
// prefetch copies (CopyToDeviceAsync), one cuBLAS handle per logical device,
// page-locked staging memory (AllocateHost), and a CachingAllocator over
// cudaMalloc with the logical device's budget (cuBLAS's workspace comes from
// it too).
//
// Built only where a CUDA compiler was found (cuda_device.cc); elsewhere
// cuda_device_stub.cc answers every call with "built without CUDA". The CUDA
// runtime is linked statically and cuBLAS is loaded with dlopen on first
// use, so binaries start on machines with neither driver nor toolkit; there
// the functions below return errors.
#ifndef PST_DEVICE_CUDA_DEVICE_H_
#define PST_DEVICE_CUDA_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_mapping.h"

namespace pst::device {

// Whether this binary was built with the CUDA backend.
bool CudaBackendBuilt();

// The GPUs the CUDA runtime sees (CUDA_VISIBLE_DEVICES applied), from their
// properties: creates no context and allocates nothing. free_bytes is left
// unknown. Errors: Unavailable with the runtime's reason (no driver, no
// device, built without CUDA).
absl::StatusOr<std::vector<GpuInfo>> ListCudaRuntimeGpus();

// A Device on the GPU with spec.gpu.pci_bus_id, budget spec.memory_limit.
// Errors: Unavailable (no driver or the GPU is not visible to CUDA),
// FailedPrecondition (cuBLAS library not found), ResourceExhausted (no room
// for the stream, handle or workspace).
absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice(const LogicalDeviceSpec& spec);

// Destroys the primary context of the GPU with this PCI bus id, releasing
// everything the process still holds on it.
// REQUIRES: no Device on that GPU is alive.
absl::Status ResetCudaGpu(const std::string& pci_bus_id);

}  // namespace pst::device

#endif  // PST_DEVICE_CUDA_DEVICE_H_
