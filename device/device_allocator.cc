#include "device/device_allocator.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pst::device {
namespace {

constexpr size_t kSmallGranule = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;

class HostRawAllocator final : public RawAllocator {
 public:
  absl::StatusOr<void*> Alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", HumanBytes(static_cast<int64_t>(bytes)), " failed"));
    }
    return p;
  }
  void Free(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace

std::unique_ptr<RawAllocator> NewHostRawAllocator() { return std::make_unique<HostRawAllocator>(); }

std::string HumanBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    return absl::StrFormat("%.2f GiB (%d bytes)", b / (1 << 30), bytes);
  }
  if (bytes >= (int64_t{1} << 20)) {
    return absl::StrFormat("%.2f MiB (%d bytes)", b / (1 << 20), bytes);
  }
  return absl::StrCat(bytes, " bytes");
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= kSmallLimit) return (bytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  // Above 1 MiB: steps of 1/8 of the power of two below the request.
  const size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(std::string device_name, std::unique_ptr<RawAllocator> raw,
                                   int64_t budget_bytes, std::string budget_source)
    : device_name_(std::move(device_name)),
      budget_source_(std::move(budget_source)),
      raw_(std::move(raw)) {
  stats_.bytes_limit = budget_bytes;
}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock lock(&mu_);
  ReleaseCachedLocked();
  if (!live_.empty()) {
    std::fprintf(stderr, "%s: allocator destroyed with %zu block(s), %s, still in use\n",
                 device_name_.c_str(), live_.size(), HumanBytes(stats_.bytes_in_use).c_str());
  }
}

absl::Status CachingAllocator::OutOfBudget(size_t requested, size_t rounded,
                                           absl::string_view why) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      device_name_, ": out of memory: cannot allocate ",
      HumanBytes(static_cast<int64_t>(requested)),
      rounded != requested ? absl::StrCat(" (", rounded, " bytes with rounding)") : "", "; ",
      HumanBytes(stats_.bytes_in_use), " in use of a budget of ", HumanBytes(stats_.bytes_limit),
      " (", budget_source_, ")", why.empty() ? "" : "; ", why));
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundSize(bytes);
  absl::MutexLock lock(&mu_);
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    const int64_t isize = static_cast<int64_t>(size);
    if (size > static_cast<size_t>(std::numeric_limits<int64_t>::max()) ||
        isize > stats_.bytes_limit - stats_.bytes_in_use) {
      return OutOfBudget(bytes, size, "");
    }
    if (stats_.bytes_reserved + isize > stats_.bytes_limit) ReleaseCachedLocked();
    absl::StatusOr<void*> fresh = raw_->Alloc(size);
    if (!fresh.ok() && stats_.bytes_reserved > stats_.bytes_in_use) {
      ReleaseCachedLocked();
      fresh = raw_->Alloc(size);
    }
    if (!fresh.ok()) return OutOfBudget(bytes, size, fresh.status().message());
    ptr = *fresh;
    stats_.bytes_reserved += isize;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
    ++stats_.num_raw_allocs;
  }
  live_.emplace(ptr, size);
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.num_allocs;
  stats_.num_live_blocks = static_cast<int64_t>(live_.size());
  return ptr;
}

void CachingAllocator::Deallocate(void* ptr) {
  if (ptr == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    std::fprintf(stderr, "%s: Deallocate of a pointer this allocator does not own: %p\n",
                 device_name_.c_str(), ptr);
    std::abort();
  }
  const size_t size = it->second;
  live_.erase(it);
  free_[size].push_back(ptr);
  stats_.bytes_in_use -= static_cast<int64_t>(size);
  stats_.num_live_blocks = static_cast<int64_t>(live_.size());
}

void CachingAllocator::ReleaseCached() {
  absl::MutexLock lock(&mu_);
  ReleaseCachedLocked();
}

void CachingAllocator::ReleaseCachedLocked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      raw_->Free(p, size);
      stats_.bytes_reserved -= static_cast<int64_t>(size);
    }
  }
  free_.clear();
}

MemoryStats CachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<GpuMemoryPolicy> ParseGpuMemoryPolicy(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  GpuMemoryPolicy policy;
  policy.text = t;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_memory=", text, ": ", why,
                     "; expected growth, fraction:F (0 < F <= 1) or limit_mb:M (M >= 1)"));
  };
  if (t.empty() || t == "growth") {
    policy.text = "growth";
    return policy;
  }
  if (absl::StartsWith(t, "fraction:")) {
    double f = 0;
    if (!absl::SimpleAtod(t.substr(9), &f) || !(f > 0 && f <= 1)) return bad("bad fraction");
    policy.kind = GpuMemoryPolicy::Kind::kFraction;
    policy.fraction = f;
    return policy;
  }
  if (absl::StartsWith(t, "limit_mb:")) {
    int64_t mb = 0;
    if (!absl::SimpleAtoi(t.substr(9), &mb) || mb < 1) return bad("bad limit");
    policy.kind = GpuMemoryPolicy::Kind::kLimit;
    policy.limit_mb = mb;
    return policy;
  }
  return bad("unknown policy");
}

absl::StatusOr<int64_t> LogicalDeviceBudget(const GpuMemoryPolicy& policy, int64_t total_bytes,
                                            int virtual_devices) {
  if (virtual_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--virtual_devices must be >= 1, got ", virtual_devices));
  }
  switch (policy.kind) {
    case GpuMemoryPolicy::Kind::kGrowth:
      return total_bytes / virtual_devices;
    case GpuMemoryPolicy::Kind::kFraction:
      return static_cast<int64_t>(static_cast<double>(total_bytes) * policy.fraction) /
             virtual_devices;
    case GpuMemoryPolicy::Kind::kLimit: {
      const int64_t limit = policy.limit_mb << 20;
      if (total_bytes > 0 && limit > total_bytes / virtual_devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--gpu_memory=", policy.text, " with --virtual_devices=", virtual_devices, " needs ",
            HumanBytes(limit * virtual_devices), " but the GPU has ", HumanBytes(total_bytes)));
      }
      return limit;
    }
  }
  return absl::InternalError("unknown GpuMemoryPolicy kind");
}

}  // namespace pst::device
