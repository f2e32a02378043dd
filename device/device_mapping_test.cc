#include "device/device_mapping.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pst::device {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A fake machine with four GPUs, as NVML would list them.
GpuInventory FourGpus() {
  GpuInventory inv;
  inv.source = "nvml";
  for (int i = 0; i < 4; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.pci_bus_id = "0000:0" + std::to_string(i + 1) + ":00.0";
    g.uuid = "GPU-" + std::to_string(i) + "aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    g.cc_major = 9;
    g.cc_minor = 0;
    g.total_bytes = 80 * kGiB;
    g.free_bytes = i == 3 ? 0 : 79 * kGiB;  // GPU 3 is full: still listed
    inv.gpus.push_back(g);
  }
  return inv;
}

std::vector<int> Select(const std::optional<std::string>& cvd, const std::string& gpus) {
  absl::StatusOr<std::vector<int>> s = SelectGpus(FourGpus(), cvd, gpus);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<int>{-1};
}

absl::Status SelectError(const std::optional<std::string>& cvd, const std::string& gpus) {
  absl::StatusOr<std::vector<int>> s = SelectGpus(FourGpus(), cvd, gpus);
  return s.ok() ? absl::OkStatus() : s.status();
}

TEST(SelectGpusTest, NoFlags_EveryGpuInOrder) {
  EXPECT_EQ(Select(std::nullopt, ""), (std::vector<int>{0, 1, 2, 3}));
}

TEST(SelectGpusTest, GpusFlag_PicksPhysicalGpusInGivenOrder) {
  EXPECT_EQ(Select(std::nullopt, "1,2"), (std::vector<int>{1, 2}));
  EXPECT_EQ(Select(std::nullopt, " 3 , 0 "), (std::vector<int>{3, 0}));
}

TEST(SelectGpusTest, CudaVisibleDevices_LimitsAndOrders) {
  EXPECT_EQ(Select("2,1", ""), (std::vector<int>{2, 1}));
  EXPECT_EQ(Select("", ""), std::vector<int>{});
  EXPECT_EQ(Select("-1", ""), std::vector<int>{});
  EXPECT_EQ(Select("3,-1,0", ""), std::vector<int>{3});    // like CUDA: -1 ends the list
  EXPECT_EQ(Select("GPU-2aaa", ""), std::vector<int>{2});  // a UUID prefix
}

TEST(SelectGpusTest, GpusWithCudaVisibleDevices_PicksAmongVisible) {
  EXPECT_EQ(Select("1,2,3", "3,1"), (std::vector<int>{3, 1}));
}

TEST(SelectGpusTest, GpusNamesHiddenGpu_InvalidArgumentNamesVariable) {
  const absl::Status s = SelectError("1,2", "0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "--gpus=0 names GPU 0")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "CUDA_VISIBLE_DEVICES=1,2 hides")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "visible GPUs: 1, 2")) << s;
}

TEST(SelectGpusTest, InvalidOrdinals_ClearErrors) {
  struct Case {
    std::optional<std::string> cvd;
    std::string gpus;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {std::nullopt, "4", "names GPU 4, but the GPUs are: 0, 1, 2, 3"},
      {std::nullopt, "x", "'x' is not a GPU index"},
      {std::nullopt, "-2", "'-2' is not a GPU index"},
      {std::nullopt, "1,1", "names GPU 1 twice"},
      {std::nullopt, "1,", "'' is not a GPU index"},
      {"7", "", "CUDA_VISIBLE_DEVICES=7: GPU 7 does not exist (GPUs on this machine: 0, 1, 2, 3)"},
      {"0,0", "", "GPU 0 is named twice"},
      {"abc", "", "'abc' is neither a GPU index nor a GPU-UUID"},
      {"GPU-9", "", "no GPU has a UUID starting 'GPU-9'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.gpus + " / " + c.cvd.value_or("(unset)"));
    const absl::Status s = SelectError(c.cvd, c.gpus);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << s;
  }
}

TEST(SelectGpusTest, RuntimeInventory_AlreadyFiltered_IgnoresVariable) {
  GpuInventory inv = FourGpus();
  inv.gpus.erase(inv.gpus.begin(), inv.gpus.begin() + 2);  // the runtime saw 2 and 3
  inv.visibility_applied = true;
  absl::StatusOr<std::vector<int>> s = SelectGpus(inv, std::string("2,3"), "3");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, std::vector<int>{3});
}

TEST(PlanDevicesTest, Gpu_VirtualDevicesSplitEachGpuWithOwnBudget) {
  DeviceOptions options;
  options.device = "gpu";
  options.gpus = "2,0";
  options.virtual_devices = 2;
  options.gpu_memory = "fraction:0.5";
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, FourGpus());
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 4u);
  const int expected_physical[] = {2, 2, 0, 0};
  for (int k = 0; k < 4; ++k) {
    const LogicalDeviceSpec& s = (*specs)[k];
    EXPECT_EQ(s.type, DeviceType::kGpu);
    EXPECT_EQ(s.logical_index, k);
    EXPECT_EQ(s.name(), "GPU:" + std::to_string(k));
    EXPECT_EQ(s.gpu.index, expected_physical[k]);
    EXPECT_EQ(s.virtual_index, k % 2);
    EXPECT_EQ(s.memory_limit, 20 * kGiB);
  }
}

TEST(PlanDevicesTest, Cpu_CpuDevicesMakesThatMany) {
  DeviceOptions options;
  options.device = "cpu";
  options.cpu_devices = 3;
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, FourGpus());
  ASSERT_TRUE(specs.ok());
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[2].name(), "CPU:2");
  EXPECT_EQ((*specs)[2].type, DeviceType::kCpu);
}

TEST(PlanDevicesTest, Auto_NoGpu_FallsBackToCpu) {
  DeviceOptions options;
  options.device = "auto";
  GpuInventory none;
  none.note = "libnvidia-ml.so.1 not found";
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, none);
  ASSERT_TRUE(specs.ok());
  ASSERT_EQ(specs->size(), 1u);
  EXPECT_EQ((*specs)[0].type, DeviceType::kCpu);
  options.cuda_visible_devices = "";
  specs = PlanDevices(options, FourGpus());
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ((*specs)[0].type, DeviceType::kCpu);
}

TEST(PlanDevicesTest, GpuWithoutGpus_FailedPreconditionSaysWhy) {
  DeviceOptions options;
  options.device = "gpu";
  GpuInventory none;
  none.note = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, none);
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(specs.status().message(), "no NVIDIA driver")) << specs.status();
}

TEST(PlanDevicesTest, BadFlags_InvalidArgument) {
  DeviceOptions options;
  options.device = "tpu";
  EXPECT_EQ(PlanDevices(options, FourGpus()).status().code(), absl::StatusCode::kInvalidArgument);
  options.device = "gpu";
  options.gpu_memory = "lots";
  EXPECT_EQ(PlanDevices(options, FourGpus()).status().code(), absl::StatusCode::kInvalidArgument);
  options.gpu_memory = "growth";
  options.virtual_devices = 0;
  EXPECT_EQ(PlanDevices(options, FourGpus()).status().code(), absl::StatusCode::kInvalidArgument);
  options.virtual_devices = 1;
  options.device = "cpu";
  options.cpu_devices = 0;
  EXPECT_EQ(PlanDevices(options, FourGpus()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DeviceLogLineTest, Gpu_MatchesTensorFlowsLine) {
  DeviceOptions options;
  options.device = "gpu";
  options.gpus = "1";
  options.gpu_memory = "limit_mb:1024";
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, FourGpus());
  ASSERT_TRUE(specs.ok());
  EXPECT_EQ(DeviceLogLine((*specs)[0], "/job:worker/replica:0/task:0"),
            "Created device /job:worker/replica:0/task:0/device:GPU:0 with 1024 MB memory: -> "
            "device: 1, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:02:00.0, compute "
            "capability: 9.0");
}

TEST(DescribeDevicesTest, ListsFullGpuAndLogicalView) {
  DeviceOptions options;
  options.device = "auto";
  options.cuda_visible_devices = "3";
  const std::string text = DescribeDevices(FourGpus(), options);
  EXPECT_TRUE(absl::StrContains(text, "GPU 3: NVIDIA H100 80GB HBM3")) << text;
  EXPECT_TRUE(absl::StrContains(text, "0 MiB free")) << text;
  EXPECT_TRUE(absl::StrContains(text, "/device:GPU:0 -> device: 3")) << text;
}

TEST(DescribeDevicesTest, NoGpu_SaysSo) {
  GpuInventory none;
  none.note = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
  DeviceOptions options;
  options.device = "auto";
  const std::string text = DescribeDevices(none, options);
  EXPECT_TRUE(absl::StrContains(text, "no GPU visible")) << text;
  EXPECT_TRUE(absl::StrContains(text, "/device:CPU:0")) << text;
}

TEST(DeviceSetTest, Create_CpuDevices) {
  DeviceOptions options;
  options.cpu_devices = 2;
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, GpuInventory());
  ASSERT_TRUE(specs.ok());
  absl::StatusOr<std::unique_ptr<DeviceSet>> set = DeviceSet::Create(*specs);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ((*set)->size(), 2);
  EXPECT_EQ((*set)->device(1)->name(), "CPU:1");
  EXPECT_EQ((*set)->device(1)->type(), DeviceType::kCpu);
}

TEST(DiscoverGpusTest, NeverFails_NoteWhenEmpty) {
  const GpuInventory inv = DiscoverGpus();
  if (inv.gpus.empty()) {
    EXPECT_FALSE(inv.note.empty());
  } else {
    for (const GpuInfo& g : inv.gpus) {
      EXPECT_FALSE(g.name.empty());
      EXPECT_GT(g.total_bytes, 0);
      EXPECT_EQ(g.pci_bus_id.size(), 12u) << g.pci_bus_id;  // 0000:00:06.0
    }
  }
}

}  // namespace
}  // namespace pst::device
