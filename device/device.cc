#include "device/device.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pst::device {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (ptr_ != nullptr) allocator_->Deallocate(ptr_);
  allocator_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

Device::Device(std::string name, DeviceType type, std::unique_ptr<CachingAllocator> allocator)
    : name_(std::move(name)), type_(type), allocator_(std::move(allocator)) {}

Device::~Device() = default;

absl::StatusOr<DeviceBuffer> Device::Allocate(size_t bytes) {
  absl::StatusOr<void*> p = allocator_->Allocate(bytes);
  if (!p.ok()) return p.status();
  return DeviceBuffer(allocator_.get(), *p, bytes);
}

absl::Status Device::EnsureCapacity(DeviceBuffer* buffer, size_t bytes) {
  if (!buffer->empty() && buffer->bytes() >= bytes) return absl::OkStatus();
  buffer->Reset();  // frees first, so the old block can serve the new one's budget
  absl::StatusOr<DeviceBuffer> fresh = Allocate(bytes);
  if (!fresh.ok()) return fresh.status();
  *buffer = std::move(*fresh);
  return absl::OkStatus();
}

absl::StatusOr<HostBuffer> Device::AllocateHost(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": cannot allocate ", bytes, " bytes of host staging memory"));
  }
  return HostBuffer(p, bytes, &std::free);
}

absl::Status Device::CopyToHostAsync(void* host, const void* device, size_t bytes) {
  return CopyToHost(host, device, bytes);
}

absl::Status Device::CopyToDeviceAsync(void* device, const void* host, size_t bytes) {
  return CopyToDevice(device, host, bytes);
}

absl::Status Device::RecordCopies(int slot) { return CheckCopySlot(slot); }

absl::Status Device::WaitForCopies(int slot) { return CheckCopySlot(slot); }

absl::Status Device::CheckCopySlot(int slot) const {
  if (slot < 0 || slot >= kCopySlots) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": copy slot ", slot, " outside [0, ", kCopySlots, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmArgs(bool trans_a, bool trans_b, int m, int n, int k, int lda, int ldb,
                           int ldc) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: negative size m=", m, " n=", n, " k=", k));
  }
  const int a_cols = trans_a ? m : k;
  const int b_cols = trans_b ? k : n;
  if (lda < std::max(1, a_cols) || ldb < std::max(1, b_cols) || ldc < std::max(1, n)) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: row stride too small: lda=", lda,
                                                   " (needs ", a_cols, "), ldb=", ldb, " (needs ",
                                                   b_cols, "), ldc=", ldc, " (needs ", n, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckGatherArgs(const char* op, int n, int dim, int group, int stride) {
  if (n < 0 || dim < 0 || group < 1 || stride < group * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bad shape n=", n, " dim=", dim, " group=", group, " stride=", stride));
  }
  return absl::OkStatus();
}

}  // namespace pst::device
