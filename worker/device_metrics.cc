#include "worker/device_metrics.h"

#include <limits>
#include <utility>

#include "prometheus/gauge.h"
#include "spdlog/spdlog.h"

namespace pst::worker {

DeviceMetrics::DeviceMetrics(common::MetricsExporter* exporter,
                             std::vector<device::Device*> devices, std::vector<int> gpus,
                             GpuReader read_gpus)
    : exporter_(exporter), read_gpus_(std::move(read_gpus)), gpus_(std::move(gpus)) {
  if (!gpus_.empty() && !read_gpus_) {
    nvml_ = std::make_unique<device::Nvml>();
    if (nvml_->ok()) {
      read_gpus_ = [this](const std::vector<int>& g) { return nvml_->Sample(g); };
    } else {
      spdlog::warn("no GPU figures in /metrics: {}", nvml_->note());
      gpus_.clear();
    }
  }
  prometheus::Registry& r = exporter_->registry();
  auto family = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return prometheus::BuildGauge().Name(name).Help(help).Labels(exporter_->labels()).Register(r);
  };
  if (!gpus_.empty()) {
    auto& utilization = family("pstrain_worker_gpu_utilization_ratio",
                               "Share of the driver's last sample period a kernel ran on the GPU");
    auto& used = family("pstrain_worker_gpu_memory_used_bytes",
                        "GPU memory in use, every process's (the driver's view)");
    auto& free = family("pstrain_worker_gpu_memory_free_bytes", "GPU memory free");
    auto& total = family("pstrain_worker_gpu_memory_total_bytes", "GPU memory in all");
    for (int gpu : gpus_) {
      const prometheus::Labels labels = {{"gpu", std::to_string(gpu)}};
      gpu_gauges_.push_back(
          {&utilization.Add(labels), &used.Add(labels), &free.Add(labels), &total.Add(labels)});
    }
  }
  auto& in_use = family("pstrain_worker_device_memory_in_use_bytes",
                        "Device memory in blocks the device's allocator handed out");
  auto& peak = family("pstrain_worker_device_memory_peak_in_use_bytes",
                      "The most device memory handed out at once");
  auto& limit = family("pstrain_worker_device_memory_limit_bytes",
                       "The device allocator's budget (--gpu_memory)");
  for (device::Device* d : devices) {
    const prometheus::Labels labels = {{"device", d->name()}};
    device_gauges_.push_back({d, &in_use.Add(labels), &peak.Add(labels), &limit.Add(labels)});
  }
  refresher_ = exporter_->AddRefresher([this] { Refresh(); });
}

DeviceMetrics::~DeviceMetrics() { exporter_->RemoveRefresher(refresher_); }

void DeviceMetrics::Refresh() {
  if (!gpus_.empty()) {
    const std::vector<device::GpuSample> samples = read_gpus_(gpus_);
    for (size_t i = 0; i < gpu_gauges_.size() && i < samples.size(); ++i) {
      const device::GpuSample& s = samples[i];
      const GpuGauges& g = gpu_gauges_[i];
      g.utilization->Set(s.utilization);
      g.used->Set(static_cast<double>(s.memory_used));
      g.free->Set(static_cast<double>(s.memory_free));
      g.total->Set(static_cast<double>(s.memory_total));
    }
  }
  for (const DeviceGauges& d : device_gauges_) {
    const device::MemoryStats stats = d.device->memory_stats();
    d.in_use->Set(static_cast<double>(stats.bytes_in_use));
    d.peak->Set(static_cast<double>(stats.peak_bytes_in_use));
    // No budget (a CPU device's default) reads as +Inf.
    d.limit->Set(stats.bytes_limit == std::numeric_limits<int64_t>::max()
                     ? std::numeric_limits<double>::infinity()
                     : static_cast<double>(stats.bytes_limit));
  }
}

}  // namespace pst::worker
