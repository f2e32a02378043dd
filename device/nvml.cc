#include "device/nvml.h"

#include <dlfcn.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pst::device {
namespace {

// NVML's entry points and structs used here, declared as its stable ABI
// has them.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
struct NvmlPciInfo {  // nvmlPciInfo_t, for nvmlDeviceGetPciInfo_v3
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_sub_system_id;
  char bus_id[32];
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlUtilization {  // nvmlUtilization_t, percents
  unsigned gpu;
  unsigned memory;
};

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*pci)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*cc)(NvmlDevice, int*, int*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;  // optional
  const char* (*error_string)(NvmlReturn) = nullptr;
};

template <typename Fn>
bool Nvml::Sym(const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib_, name));
  if (*fn == nullptr) note_ = absl::StrCat("libnvidia-ml.so.1 has no ", name);
  return *fn != nullptr;
}

Nvml::Nvml() : api_(std::make_unique<Api>()) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    note_ = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
    return;
  }
  Api& a = *api_;
  const bool all = Sym("nvmlInit_v2", &a.init) && Sym("nvmlShutdown", &a.shutdown) &&
                   Sym("nvmlDeviceGetCount_v2", &a.count) &&
                   Sym("nvmlDeviceGetHandleByIndex_v2", &a.handle) &&
                   Sym("nvmlDeviceGetName", &a.name) && Sym("nvmlDeviceGetUUID", &a.uuid) &&
                   Sym("nvmlDeviceGetPciInfo_v3", &a.pci) &&
                   Sym("nvmlDeviceGetMemoryInfo", &a.memory) &&
                   Sym("nvmlDeviceGetCudaComputeCapability", &a.cc) &&
                   Sym("nvmlErrorString", &a.error_string);
  if (!all) return;
  a.utilization = reinterpret_cast<decltype(a.utilization)>(
      dlsym(lib_, "nvmlDeviceGetUtilizationRates"));
  const NvmlReturn r = a.init();
  if (r != kNvmlSuccess) {
    note_ = absl::StrCat("nvmlInit failed: ", a.error_string(r));
    return;
  }
  initialized_ = true;
}

Nvml::~Nvml() {
  if (initialized_) api_->shutdown();
  if (lib_ != nullptr) dlclose(lib_);
}

std::string Nvml::Error(const char* what, int r) const {
  return absl::StrCat(what, ": ", api_->error_string(r));
}

absl::StatusOr<std::vector<GpuInfo>> Nvml::List() {
  const Api& a = *api_;
  unsigned count = 0;
  NvmlReturn r = a.count(&count);
  if (r != kNvmlSuccess) return absl::UnavailableError(Error("nvmlDeviceGetCount", r));
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice dev = nullptr;
    r = a.handle(i, &dev);
    if (r != kNvmlSuccess) return absl::UnavailableError(Error("nvmlDeviceGetHandleByIndex", r));
    GpuInfo gpu;
    gpu.index = static_cast<int>(i);
    char buf[128] = {};
    if (a.name(dev, buf, sizeof(buf)) == kNvmlSuccess) gpu.name = buf;
    char uuid[128] = {};
    if (a.uuid(dev, uuid, sizeof(uuid)) == kNvmlSuccess) gpu.uuid = uuid;
    NvmlPciInfo pci = {};
    if (a.pci(dev, &pci) == kNvmlSuccess) {
      gpu.pci_bus_id = absl::StrFormat("%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);
    }
    NvmlMemory mem = {};
    if (a.memory(dev, &mem) == kNvmlSuccess) {
      gpu.total_bytes = static_cast<int64_t>(mem.total);
      gpu.free_bytes = static_cast<int64_t>(mem.free);
    }
    int major = 0, minor = 0;
    if (a.cc(dev, &major, &minor) == kNvmlSuccess) {
      gpu.cc_major = major;
      gpu.cc_minor = minor;
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

std::vector<GpuSample> Nvml::Sample(const std::vector<int>& indices) {
  const Api& a = *api_;
  std::vector<GpuSample> samples;
  for (int index : indices) {
    GpuSample sample;
    sample.index = index;
    NvmlDevice dev = nullptr;
    if (index >= 0 && a.handle(static_cast<unsigned>(index), &dev) == kNvmlSuccess) {
      NvmlMemory mem = {};
      if (a.memory(dev, &mem) == kNvmlSuccess) {
        sample.memory_used = static_cast<int64_t>(mem.used);
        sample.memory_free = static_cast<int64_t>(mem.free);
        sample.memory_total = static_cast<int64_t>(mem.total);
      }
      NvmlUtilization util = {};
      if (a.utilization != nullptr && a.utilization(dev, &util) == kNvmlSuccess) {
        sample.utilization = util.gpu / 100.0;
      }
    }
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace pst::device
