// NVML, the driver's management library, loaded with dlopen (no nvml.h
// needed, and binaries start on machines without a driver): the list of
// physical GPUs (DiscoverGpus, device_mapping.h) and their live figures,
// utilization and memory, for a worker's /metrics.
#ifndef PST_DEVICE_NVML_H_
#define PST_DEVICE_NVML_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/device_mapping.h"

namespace pst::device {

// One physical GPU's figures of the moment, as the driver sees them (every
// process's use together).
struct GpuSample {
  int index = 0;             // physical index (nvidia-smi order)
  double utilization = -1;   // share of the last sample period a kernel ran, 0..1; -1 unknown
  int64_t memory_used = -1;  // bytes; -1 unknown
  int64_t memory_free = -1;
  int64_t memory_total = -1;
};

// Thread-compatible; one per user (NVML's init and shutdown are counted).
class Nvml {
 public:
  // Loads and initializes NVML; on failure, ok() is false and note() says why.
  Nvml();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return initialized_; }
  const std::string& note() const { return note_; }

  // Every physical GPU. Unavailable when NVML fails to list them.
  absl::StatusOr<std::vector<GpuInfo>> List();
  // The figures of the GPUs `indices` (physical); a GPU NVML cannot read
  // comes back with unknown (-1) figures. REQUIRES: ok().
  std::vector<GpuSample> Sample(const std::vector<int>& indices);

 private:
  struct Api;  // the entry points
  template <typename Fn>
  bool Sym(const char* name, Fn* fn);
  std::string Error(const char* what, int r) const;

  void* lib_ = nullptr;
  bool initialized_ = false;
  std::string note_;
  std::unique_ptr<Api> api_;
};

}  // namespace pst::device

#endif  // PST_DEVICE_NVML_H_
