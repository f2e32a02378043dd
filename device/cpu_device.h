// The CPU Device: OpenBLAS for GEMM, plain loops for the rest. It is the
// reference every other device is tested against. Its "device memory" is
// host memory, so the copies are memcpy, and every call completes before it
// returns.
#ifndef PST_DEVICE_CPU_DEVICE_H_
#define PST_DEVICE_CPU_DEVICE_H_

#include <cstdint>
#include <limits>
#include <memory>

#include "device/device.h"
#include "device/device_allocator.h"

namespace pst::device {

inline constexpr int64_t kUnlimitedBudget = std::numeric_limits<int64_t>::max();

// Logical device "CPU:<index>" with its own allocator and budget.
std::unique_ptr<Device> NewCpuDevice(int index, int64_t budget_bytes = kUnlimitedBudget);

// The same, over a caller's backing allocator (tests count its calls).
std::unique_ptr<Device> NewCpuDevice(int index, std::unique_ptr<RawAllocator> raw,
                                     int64_t budget_bytes);

}  // namespace pst::device

#endif  // PST_DEVICE_CPU_DEVICE_H_
