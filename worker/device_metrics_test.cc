// DeviceMetrics (device_metrics.h): each logical device's allocator books
// and each GPU's driver figures, read into gauges at each scrape. The GPUs
// here are a fake reader's (no GPU where the tests run); the devices are
// real CPU devices with budgets.
#include "worker/device_metrics.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "device/cpu_device.h"

namespace pst::worker {
namespace {

// Every gauge named `name`, by the value of its label `label`.
std::map<std::string, double> Gauges(common::MetricsExporter& exporter, const std::string& name,
                                     const std::string& label) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& family : exporter.registry().Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == label) out[l.value] = m.gauge.value;
      }
    }
  }
  return out;
}

TEST(DeviceMetricsTest, AllocatorBooksAndGpuFigures_ReadAtEachRefresh) {
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> exporter =
      common::MetricsExporter::Start("127.0.0.1", 0, "worker:0");
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  std::unique_ptr<device::Device> cpu0 = device::NewCpuDevice(0, int64_t{1} << 30);
  std::unique_ptr<device::Device> cpu1 = device::NewCpuDevice(1, int64_t{1} << 20);
  int reads = 0;
  std::vector<int> asked;
  auto fake = [&](const std::vector<int>& gpus) {
    ++reads;
    asked = gpus;
    std::vector<device::GpuSample> samples;
    for (int g : gpus) {
      samples.push_back({g, 0.25 * reads, int64_t{1000} * g + reads, 5000 - reads, 6000});
    }
    return samples;
  };
  DeviceMetrics metrics(exporter->get(), {cpu0.get(), cpu1.get()}, {3, 1}, fake);

  absl::StatusOr<device::DeviceBuffer> block = cpu1->Allocate(4096);
  ASSERT_TRUE(block.ok()) << block.status();
  metrics.Refresh();
  EXPECT_EQ(asked, (std::vector<int>{3, 1}));
  const std::map<std::string, double> limit =
      Gauges(**exporter, "pstrain_worker_device_memory_limit_bytes", "device");
  EXPECT_EQ(limit.at(cpu0->name()), static_cast<double>(int64_t{1} << 30));
  EXPECT_EQ(limit.at(cpu1->name()), static_cast<double>(int64_t{1} << 20));
  std::map<std::string, double> in_use =
      Gauges(**exporter, "pstrain_worker_device_memory_in_use_bytes", "device");
  EXPECT_EQ(in_use.at(cpu0->name()), 0);
  EXPECT_GE(in_use.at(cpu1->name()), 4096);
  const double held = in_use.at(cpu1->name());

  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_gpu_utilization_ratio", "gpu"),
            (std::map<std::string, double>{{"1", 0.25}, {"3", 0.25}}));
  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_gpu_memory_used_bytes", "gpu"),
            (std::map<std::string, double>{{"1", 1001}, {"3", 3001}}));
  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_gpu_memory_total_bytes", "gpu").at("3"), 6000);

  // Freed: in use falls, the peak stays; the GPUs are read again.
  *block = device::DeviceBuffer();
  metrics.Refresh();
  in_use = Gauges(**exporter, "pstrain_worker_device_memory_in_use_bytes", "device");
  EXPECT_EQ(in_use.at(cpu1->name()), 0);
  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_device_memory_peak_in_use_bytes", "device")
                .at(cpu1->name()),
            held);
  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_gpu_memory_free_bytes", "gpu").at("1"), 4998);
}

TEST(DeviceMetricsTest, NoGpus_OnlyTheDevicesBooks_NoGpuGauges) {
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> exporter =
      common::MetricsExporter::Start("127.0.0.1", 0, "worker:0");
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  std::unique_ptr<device::Device> cpu = device::NewCpuDevice(0);
  DeviceMetrics metrics(exporter->get(), {cpu.get()}, {});
  metrics.Refresh();
  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_device_memory_in_use_bytes", "device").size(), 1u);
  EXPECT_EQ(Gauges(**exporter, "pstrain_worker_device_memory_limit_bytes", "device")
                .at(cpu->name()),
            std::numeric_limits<double>::infinity());  // no budget
  EXPECT_TRUE(Gauges(**exporter, "pstrain_worker_gpu_utilization_ratio", "gpu").empty());
}

}  // namespace
}  // namespace pst::worker
