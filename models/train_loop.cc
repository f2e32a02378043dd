#include "models/train_loop.h"

#include "device/cpu_device.h"

namespace pst::worker {

bool HostOnly(const std::vector<Device*>& devices) {
  return devices.empty() || (devices.size() == 1 && devices[0]->type() == DeviceType::kCpu);
}

Device* DefaultCpuDevice() {
  static Device* const device = NewCpuDevice(0).release();
  return device;
}

}  // namespace pst::worker
