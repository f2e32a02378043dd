// The CUDA backend's entry points in a build without a CUDA compiler.
#include "device/cuda_device.h"

namespace pst::device {
namespace {
constexpr char kNotBuilt[] = "this binary was built without CUDA (no nvcc at configure time)";
}  // namespace

bool CudaBackendBuilt() { return false; }

absl::StatusOr<std::vector<GpuInfo>> ListCudaRuntimeGpus() {
  return absl::UnavailableError(kNotBuilt);
}

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice(const LogicalDeviceSpec&) {
  return absl::UnavailableError(kNotBuilt);
}

absl::Status ResetCudaGpu(const std::string&) { return absl::OkStatus(); }

}  // namespace pst::device
