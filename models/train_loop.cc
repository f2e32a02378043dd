#include "models/train_loop.h"

#include "device/cpu_device.h"

namespace pst::models {

bool HostOnly(const std::vector<device::Device*>& devices) {
  return devices.empty() || (devices.size() == 1 && devices[0]->type() == device::DeviceType::kCpu);
}

device::Device* DefaultCpuDevice() {
  static device::Device* const device = device::NewCpuDevice(0).release();
  return device;
}

}  // namespace pst::models
