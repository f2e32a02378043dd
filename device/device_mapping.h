// Which devices a worker has and which it uses: GPU discovery, visibility
// (--gpus and CUDA_VISIBLE_DEVICES), logical devices (--virtual_devices,
// --cpu_devices), their memory budgets (--gpu_memory), and the DeviceSet
// that owns the Devices made from them.
//
// Numbering, as nvidia-smi and TensorFlow's log show it:
//   - a physical GPU's index is its NVML index (nvidia-smi's "GPU" column,
//     PCI bus order);
//   - CUDA_VISIBLE_DEVICES (physical indices or GPU-UUID prefixes) limits
//     the process to those GPUs, as CUDA does, and orders them;
//   - --gpus=1,2 picks physical GPUs, in that order, among the visible ones;
//     without it every visible GPU is used;
//   - logical device GPU:k is the k-th picked GPU (with --virtual_devices=N,
//     GPU:k*N .. GPU:k*N+N-1 share it).
// Listing reads NVML (loaded with dlopen, so nothing is linked) and never
// creates a CUDA context or allocates GPU memory, so a GPU whose memory is
// full is still listed. Without NVML it falls back to the CUDA runtime's
// device properties (no context either); that view is already limited by
// CUDA_VISIBLE_DEVICES.
//
// Thread-safety: the free functions are thread-compatible; a DeviceSet is
// immutable after creation (its Devices have their own rules, device.h).
#ifndef PST_DEVICE_DEVICE_MAPPING_H_
#define PST_DEVICE_DEVICE_MAPPING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "device/device_allocator.h"

namespace pst::device {

struct GpuInfo {
  int index = 0;           // physical index (nvidia-smi order)
  std::string name;        // "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;  // "0000:00:06.0"
  std::string uuid;        // "GPU-4f0c...", empty if unknown
  int cc_major = 0;
  int cc_minor = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes = -1;  // -1: unknown
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  // "nvml", "cuda runtime" or "none".
  std::string source = "none";
  // True when the list came from the CUDA runtime, which already applied
  // CUDA_VISIBLE_DEVICES.
  bool visibility_applied = false;
  // Why no GPU is listed (no driver, no device, built without CUDA), or
  // notes on the fallback.
  std::string note;
};

// Every physical GPU of this machine. Never fails: a machine without a
// driver has an empty inventory whose note says why.
GpuInventory DiscoverGpus();

// The physical indices of the GPUs to use, in logical order.
// `cuda_visible_devices` is the variable's value (nullopt: unset);
// `gpus_flag` is --gpus ("" for every visible GPU).
// Errors: InvalidArgument naming the bad entry: not a number, a GPU that
// does not exist, a GPU hidden by CUDA_VISIBLE_DEVICES, or one named twice.
absl::StatusOr<std::vector<int>> SelectGpus(const GpuInventory& inventory,
                                            const std::optional<std::string>& cuda_visible_devices,
                                            absl::string_view gpus_flag);

// The device flags, as the worker reads them.
struct DeviceOptions {
  std::string device = "cpu";  // cpu | gpu | auto
  std::string gpus;            // --gpus
  std::string gpu_memory = "growth";
  int virtual_devices = 1;
  int cpu_devices = 1;
  std::optional<std::string> cuda_visible_devices;  // the environment's
};

// Options with cuda_visible_devices read from the environment.
DeviceOptions DeviceOptionsWithEnvironment(DeviceOptions options);

struct LogicalDeviceSpec {
  DeviceType type = DeviceType::kCpu;
  int logical_index = 0;  // GPU:k or CPU:k
  int virtual_index = 0;  // which of --virtual_devices on its GPU
  int64_t memory_limit = 0;
  std::string budget_source;  // for messages: "--gpu_memory=growth (1 of 2 virtual devices)"
  GpuInfo gpu;                // GPU only
  std::string name() const;   // "GPU:0"
};

// The logical devices the options ask for.
// Errors: InvalidArgument for a bad flag (device kind, --gpus, --gpu_memory,
// counts < 1); FailedPrecondition for --device=gpu with no GPU visible (the
// message says why). --device=auto uses the GPUs when any is visible, else
// the CPU.
absl::StatusOr<std::vector<LogicalDeviceSpec>> PlanDevices(const DeviceOptions& options,
                                                           const GpuInventory& inventory);

// The line TensorFlow logs per device, e.g.
// "Created device /job:worker/replica:0/task:0/device:GPU:0 with 81079 MB
// memory: -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id:
// 0000:00:06.0, compute capability: 9.0". `job_prefix` is
// "/job:worker/replica:0/task:0".
std::string DeviceLogLine(const LogicalDeviceSpec& spec, absl::string_view job_prefix);

// A human-readable listing of the inventory and of the logical view the
// options give (for `pstrain devices`).
std::string DescribeDevices(const GpuInventory& inventory, const DeviceOptions& options);

// Owns a worker's logical devices. On destruction every Device is destroyed
// (their memory returned) and then the primary CUDA context of each GPU
// used is reset, so nothing stays allocated on the GPUs.
class DeviceSet {
 public:
  ~DeviceSet();
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  const std::vector<LogicalDeviceSpec>& specs() const { return specs_; }
  int size() const { return static_cast<int>(devices_.size()); }
  Device* device(int i) const { return devices_[i].get(); }
  std::vector<Device*> devices() const;

  // Makes one Device per spec.
  // Errors: those of NewCudaDevice (no driver, cuBLAS missing, ...).
  static absl::StatusOr<std::unique_ptr<DeviceSet>> Create(std::vector<LogicalDeviceSpec> specs);

 private:
  DeviceSet() = default;
  std::vector<LogicalDeviceSpec> specs_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace pst::device

#endif  // PST_DEVICE_DEVICE_MAPPING_H_
