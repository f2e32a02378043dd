#include "device/device_mapping.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "device/cpu_device.h"
#include "device/cuda_device.h"
#include "device/nvml.h"

namespace pst::device {
namespace {

std::string IndexList(const std::vector<int>& v) {
  return v.empty() ? "none" : absl::StrJoin(v, ", ");
}

std::vector<int> AllIndices(const GpuInventory& inventory) {
  std::vector<int> out;
  for (const GpuInfo& g : inventory.gpus) out.push_back(g.index);
  return out;
}

const GpuInfo* FindGpu(const GpuInventory& inventory, int index) {
  for (const GpuInfo& g : inventory.gpus) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

// CUDA_VISIBLE_DEVICES as physical indices, in its order. Like CUDA, a
// negative entry ends the list; unlike CUDA, which silently drops the rest of
// the list at a bad entry, a bad entry is an error.
absl::StatusOr<std::vector<int>> ParseCudaVisibleDevices(const std::string& value,
                                                         const GpuInventory& inventory) {
  std::vector<int> out;
  const absl::string_view trimmed = absl::StripAsciiWhitespace(value);
  if (trimmed.empty()) return out;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA_VISIBLE_DEVICES=", value, ": ", why,
                     " (GPUs on this machine: ", IndexList(AllIndices(inventory)), ")"));
  };
  for (absl::string_view raw : absl::StrSplit(trimmed, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    int index = 0;
    if (absl::SimpleAtoi(entry, &index)) {
      if (index < 0) break;
      if (FindGpu(inventory, index) == nullptr) {
        return bad(absl::StrCat("GPU ", index, " does not exist"));
      }
    } else if (absl::StartsWithIgnoreCase(entry, "GPU-")) {
      const GpuInfo* match = nullptr;
      for (const GpuInfo& g : inventory.gpus) {
        if (!g.uuid.empty() && absl::StartsWithIgnoreCase(g.uuid, entry)) {
          if (match != nullptr) return bad(absl::StrCat("'", entry, "' matches several GPUs"));
          match = &g;
        }
      }
      if (match == nullptr) return bad(absl::StrCat("no GPU has a UUID starting '", entry, "'"));
      index = match->index;
    } else {
      return bad(absl::StrCat("'", entry, "' is neither a GPU index nor a GPU-UUID"));
    }
    if (std::find(out.begin(), out.end(), index) != out.end()) {
      return bad(absl::StrCat("GPU ", index, " is named twice"));
    }
    out.push_back(index);
  }
  return out;
}

}  // namespace

GpuInventory DiscoverGpus() {
  GpuInventory inventory;
  std::string nvml_note;
  {
    Nvml nvml;
    if (nvml.ok()) {
      absl::StatusOr<std::vector<GpuInfo>> gpus = nvml.List();
      if (gpus.ok()) {
        inventory.gpus = std::move(*gpus);
        inventory.source = "nvml";
        if (inventory.gpus.empty()) inventory.note = "NVML lists no GPU";
        return inventory;
      }
      nvml_note = std::string(gpus.status().message());
    } else {
      nvml_note = nvml.note();
    }
  }
  // No NVML: the CUDA runtime's view, already limited to the visible GPUs.
  absl::StatusOr<std::vector<GpuInfo>> gpus = ListCudaRuntimeGpus();
  if (!gpus.ok()) {
    inventory.note = absl::StrCat(nvml_note, "; ", gpus.status().message());
    return inventory;
  }
  inventory.source = "cuda runtime";
  inventory.visibility_applied = true;
  inventory.note = absl::StrCat(nvml_note, "; listed through the CUDA runtime");
  // Physical indices: CUDA ordinal i is the i-th CUDA_VISIBLE_DEVICES entry
  // when that entry is a number.
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr) {
    std::vector<std::string> entries = absl::StrSplit(cvd, ',', absl::SkipWhitespace());
    for (size_t i = 0; i < gpus->size() && i < entries.size(); ++i) {
      int index = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(entries[i]), &index) && index >= 0) {
        (*gpus)[i].index = index;
      }
    }
  }
  inventory.gpus = std::move(*gpus);
  if (inventory.gpus.empty()) inventory.note = "the CUDA runtime lists no GPU";
  return inventory;
}

absl::StatusOr<std::vector<int>> SelectGpus(const GpuInventory& inventory,
                                            const std::optional<std::string>& cuda_visible_devices,
                                            absl::string_view gpus_flag) {
  std::vector<int> visible;
  std::string hidden_by;
  if (inventory.visibility_applied || !cuda_visible_devices.has_value()) {
    visible = AllIndices(inventory);
  } else {
    PST_ASSIGN_OR_RETURN(visible, ParseCudaVisibleDevices(*cuda_visible_devices, inventory));
    hidden_by = absl::StrCat("CUDA_VISIBLE_DEVICES=", *cuda_visible_devices);
  }
  if (absl::StripAsciiWhitespace(gpus_flag).empty()) return visible;

  std::vector<int> selected;
  for (absl::string_view raw : absl::StrSplit(gpus_flag, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    int index = 0;
    if (!absl::SimpleAtoi(entry, &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", gpus_flag, ": '", entry, "' is not a GPU index"));
    }
    if (FindGpu(inventory, index) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", gpus_flag, " names GPU ", index, ", but ",
                       inventory.gpus.empty()
                           ? absl::StrCat("no GPU is visible (", inventory.note, ")")
                           : absl::StrCat("the GPUs are: ", IndexList(AllIndices(inventory)))));
    }
    if (std::find(visible.begin(), visible.end(), index) == visible.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", gpus_flag, " names GPU ", index, ", which ", hidden_by,
                       " hides (visible GPUs: ", IndexList(visible), ")"));
    }
    if (std::find(selected.begin(), selected.end(), index) != selected.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus=", gpus_flag, " names GPU ", index, " twice"));
    }
    selected.push_back(index);
  }
  return selected;
}

DeviceOptions DeviceOptionsWithEnvironment(DeviceOptions options) {
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr) {
    options.cuda_visible_devices = cvd;
  } else {
    options.cuda_visible_devices.reset();
  }
  return options;
}

std::string LogicalDeviceSpec::name() const {
  return absl::StrCat(type == DeviceType::kGpu ? "GPU:" : "CPU:", logical_index);
}

absl::StatusOr<std::vector<LogicalDeviceSpec>> PlanDevices(const DeviceOptions& options,
                                                           const GpuInventory& inventory) {
  const std::string kind = absl::AsciiStrToLower(options.device);
  if (kind != "cpu" && kind != "gpu" && kind != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", options.device, ": expected cpu, gpu or auto"));
  }
  if (options.cpu_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_devices must be >= 1, got ", options.cpu_devices));
  }
  if (options.virtual_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--virtual_devices must be >= 1, got ", options.virtual_devices));
  }
  PST_ASSIGN_OR_RETURN(GpuMemoryPolicy policy, ParseGpuMemoryPolicy(options.gpu_memory));

  std::vector<LogicalDeviceSpec> specs;
  if (kind != "cpu") {
    PST_ASSIGN_OR_RETURN(std::vector<int> physical,
                         SelectGpus(inventory, options.cuda_visible_devices, options.gpus));
    if (physical.empty() && kind == "gpu") {
      std::string why =
          inventory.gpus.empty()
              ? inventory.note
              : absl::StrCat("CUDA_VISIBLE_DEVICES=", options.cuda_visible_devices.value_or(""),
                             " hides all of them");
      return absl::FailedPreconditionError(
          absl::StrCat("--device=gpu, but no GPU is visible: ", why));
    }
    int logical = 0;
    for (int p : physical) {
      const GpuInfo& gpu = *FindGpu(inventory, p);
      PST_ASSIGN_OR_RETURN(int64_t budget,
                           LogicalDeviceBudget(policy, gpu.total_bytes, options.virtual_devices));
      for (int v = 0; v < options.virtual_devices; ++v) {
        LogicalDeviceSpec spec;
        spec.type = DeviceType::kGpu;
        spec.logical_index = logical++;
        spec.virtual_index = v;
        spec.memory_limit = budget;
        spec.budget_source = absl::StrCat("--gpu_memory=", policy.text);
        if (options.virtual_devices > 1) {
          absl::StrAppend(&spec.budget_source, ", 1 of ", options.virtual_devices,
                          " virtual devices on GPU ", p);
        }
        spec.gpu = gpu;
        specs.push_back(std::move(spec));
      }
    }
    if (!specs.empty()) return specs;
  }
  for (int i = 0; i < options.cpu_devices; ++i) {
    LogicalDeviceSpec spec;
    spec.type = DeviceType::kCpu;
    spec.logical_index = i;
    spec.memory_limit = kUnlimitedBudget;
    spec.budget_source = "no limit";
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string DeviceLogLine(const LogicalDeviceSpec& spec, absl::string_view job_prefix) {
  if (spec.type == DeviceType::kCpu) {
    return absl::StrCat("Created device ", job_prefix, "/device:", spec.name());
  }
  return absl::StrCat("Created device ", job_prefix, "/device:", spec.name(), " with ",
                      spec.memory_limit >> 20, " MB memory: -> device: ", spec.gpu.index,
                      ", name: ", spec.gpu.name, ", pci bus id: ", spec.gpu.pci_bus_id,
                      ", compute capability: ", spec.gpu.cc_major, ".", spec.gpu.cc_minor);
}

std::string DescribeDevices(const GpuInventory& inventory, const DeviceOptions& options) {
  std::string out;
  if (inventory.gpus.empty()) {
    absl::StrAppend(&out, "Physical GPUs: no GPU visible (", inventory.note, ")\n");
  } else {
    absl::StrAppend(&out, "Physical GPUs (from ", inventory.source,
                    inventory.visibility_applied ? ", after CUDA_VISIBLE_DEVICES" : "", "):\n");
    for (const GpuInfo& g : inventory.gpus) {
      absl::StrAppend(&out, "  GPU ", g.index, ": ", g.name, ", pci bus id: ", g.pci_bus_id,
                      ", compute capability: ", g.cc_major, ".", g.cc_minor,
                      ", memory: ", g.total_bytes >> 20, " MiB total");
      if (g.free_bytes >= 0) absl::StrAppend(&out, ", ", g.free_bytes >> 20, " MiB free");
      if (!g.uuid.empty()) absl::StrAppend(&out, ", ", g.uuid);
      absl::StrAppend(&out, "\n");
    }
  }
  absl::StrAppend(&out, "CUDA_VISIBLE_DEVICES: ",
                  options.cuda_visible_devices.has_value()
                      ? absl::StrCat("'", *options.cuda_visible_devices, "'")
                      : std::string("(unset)"),
                  "\n");
  absl::StrAppend(&out, "Logical devices (--device=", options.device, " --gpus=", options.gpus,
                  " --virtual_devices=", options.virtual_devices,
                  " --gpu_memory=", options.gpu_memory, " --cpu_devices=", options.cpu_devices,
                  "):\n");
  absl::StatusOr<std::vector<LogicalDeviceSpec>> specs = PlanDevices(options, inventory);
  if (!specs.ok()) {
    absl::StrAppend(&out, "  error: ", specs.status().ToString(), "\n");
    return out;
  }
  for (const LogicalDeviceSpec& spec : *specs) {
    if (spec.type == DeviceType::kCpu) {
      absl::StrAppend(&out, "  /device:", spec.name(), " -> host CPU\n");
    } else {
      absl::StrAppend(&out, "  /device:", spec.name(), " -> device: ", spec.gpu.index,
                      ", name: ", spec.gpu.name, ", pci bus id: ", spec.gpu.pci_bus_id,
                      ", compute capability: ", spec.gpu.cc_major, ".", spec.gpu.cc_minor,
                      ", memory budget: ", spec.memory_limit >> 20, " MB\n");
    }
  }
  return out;
}

DeviceSet::~DeviceSet() {
  std::set<std::string> gpus;
  for (const LogicalDeviceSpec& spec : specs_) {
    if (spec.type == DeviceType::kGpu) gpus.insert(spec.gpu.pci_bus_id);
  }
  devices_.clear();
  for (const std::string& pci : gpus) (void)ResetCudaGpu(pci);
}

std::vector<Device*> DeviceSet::devices() const {
  std::vector<Device*> out;
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

absl::StatusOr<std::unique_ptr<DeviceSet>> DeviceSet::Create(std::vector<LogicalDeviceSpec> specs) {
  std::unique_ptr<DeviceSet> set(new DeviceSet());
  for (const LogicalDeviceSpec& spec : specs) {
    if (spec.type == DeviceType::kCpu) {
      set->devices_.push_back(NewCpuDevice(spec.logical_index, spec.memory_limit));
    } else {
      absl::StatusOr<std::unique_ptr<Device>> device = NewCudaDevice(spec);
      if (!device.ok()) return device.status();  // `set` cleans up what was made
      set->devices_.push_back(std::move(*device));
    }
    set->specs_.push_back(spec);
  }
  return set;
}

}  // namespace pst::device
