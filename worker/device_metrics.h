// A worker's devices in its /metrics (--metrics_port), read at each scrape:
//   pstrain_worker_gpu_utilization_ratio{gpu}   share of the driver's last
//                                               sample period a kernel ran
//   pstrain_worker_gpu_memory_used_bytes{gpu}   the driver's view: every
//   pstrain_worker_gpu_memory_free_bytes{gpu}   process on the GPU
//   pstrain_worker_gpu_memory_total_bytes{gpu}
// for each physical GPU the worker uses (NVML; none without a driver), and
//   pstrain_worker_device_memory_in_use_bytes{device}
//   pstrain_worker_device_memory_peak_in_use_bytes{device}
//   pstrain_worker_device_memory_limit_bytes{device}
// for each logical device (GPU:0, CPU:0), from its allocator's books: the
// blocks handed out, their peak, and the budget (--gpu_memory; +Inf for
// none).
#ifndef PST_WORKER_DEVICE_METRICS_H_
#define PST_WORKER_DEVICE_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "device/device.h"
#include "device/nvml.h"

namespace pst::worker {

class DeviceMetrics {
 public:
  // The figures of the physical GPUs asked for.
  using GpuReader = std::function<std::vector<device::GpuSample>(const std::vector<int>& gpus)>;

  // Registers the gauges of `devices` (named by Device::name()) and of the
  // physical GPUs `gpus` on `exporter`, refreshed before each scrape.
  // `read_gpus` empty: NVML's (no GPU gauge when NVML cannot load).
  // REQUIRES: `exporter` and `devices` outlive this.
  DeviceMetrics(common::MetricsExporter* exporter, std::vector<device::Device*> devices,
                std::vector<int> gpus, GpuReader read_gpus = nullptr);
  // After it returns, no scrape reads the devices.
  ~DeviceMetrics();
  DeviceMetrics(const DeviceMetrics&) = delete;
  DeviceMetrics& operator=(const DeviceMetrics&) = delete;

  // Reads every figure into its gauge (what a scrape runs first).
  void Refresh();

 private:
  struct GpuGauges {
    prometheus::Gauge *utilization, *used, *free, *total;
  };
  struct DeviceGauges {
    device::Device* device;
    prometheus::Gauge *in_use, *peak, *limit;
  };

  common::MetricsExporter* const exporter_;
  std::unique_ptr<device::Nvml> nvml_;  // when read_gpus was not given
  GpuReader read_gpus_;
  std::vector<int> gpus_;
  std::vector<GpuGauges> gpu_gauges_;  // as gpus_
  std::vector<DeviceGauges> device_gauges_;
  int refresher_ = -1;
};

}  // namespace pst::worker

#endif  // PST_WORKER_DEVICE_METRICS_H_
