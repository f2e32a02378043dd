// DeviceOptions from the command line (--device, --gpus, --gpu_memory,
// --virtual_devices, --cpu_devices) and CUDA_VISIBLE_DEVICES, for the
// executables that read them: the worker and `pstrain devices`. The flags
// live in flags/job_flags, which only executables link.
#ifndef PST_FLAGS_DEVICE_OPTIONS_FROM_FLAGS_H_
#define PST_FLAGS_DEVICE_OPTIONS_FROM_FLAGS_H_

#include "absl/flags/flag.h"
#include "device/device_mapping.h"
#include "flags/job_flags.h"

namespace pst::flags {

inline device::DeviceOptions DeviceOptionsFromFlags() {
  device::DeviceOptions options;
  options.device = absl::GetFlag(FLAGS_device);
  options.gpus = absl::GetFlag(FLAGS_gpus);
  options.gpu_memory = absl::GetFlag(FLAGS_gpu_memory);
  options.virtual_devices = absl::GetFlag(FLAGS_virtual_devices);
  options.cpu_devices = absl::GetFlag(FLAGS_cpu_devices);
  return device::DeviceOptionsWithEnvironment(options);
}

}  // namespace pst::flags

#endif  // PST_FLAGS_DEVICE_OPTIONS_FROM_FLAGS_H_
