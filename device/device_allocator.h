// Device memory: a caching allocator with a hard budget, over a pluggable
// backing allocator (cudaMalloc on a GPU, aligned malloc on the CPU, a fake in
// tests), and the --gpu_memory policy that sets the budget.
//
// The caching allocator rounds each request up to a size class and keeps
// freed blocks on a free list per class, so a training loop that allocates
// the same shapes every step reaches a steady state with no calls to the
// backing allocator. It never holds more than its budget from the backing
// allocator: when a new block would exceed it, the cached free blocks are
// returned first, and if that is not enough the request fails with
// ResourceExhausted, not a crash deep inside a library.
#ifndef PST_DEVICE_DEVICE_ALLOCATOR_H_
#define PST_DEVICE_DEVICE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace pst::device {

// Where the memory really comes from.
// Thread-safety: called under the CachingAllocator's lock, one call at a time.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // Errors: ResourceExhausted when the device has no room.
  virtual absl::StatusOr<void*> Alloc(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;
};

// 64-byte aligned host memory from the C library.
std::unique_ptr<RawAllocator> NewHostRawAllocator();

struct MemoryStats {
  int64_t bytes_in_use = 0;       // in blocks handed out (rounded sizes)
  int64_t peak_bytes_in_use = 0;  //
  int64_t bytes_reserved = 0;     // held from the backing allocator: in use + cached
  int64_t peak_bytes_reserved = 0;
  int64_t bytes_limit = 0;     // the budget
  int64_t num_allocs = 0;      // successful Allocate calls
  int64_t num_raw_allocs = 0;  // of which needed the backing allocator
  int64_t num_live_blocks = 0;
};

// Thread-safety: safe for concurrent use.
class CachingAllocator {
 public:
  // `device_name` and `budget_source` (e.g. "--gpu_memory=limit_mb:512")
  // only appear in error messages.
  CachingAllocator(std::string device_name, std::unique_ptr<RawAllocator> raw, int64_t budget_bytes,
                   std::string budget_source);
  // Returns every cached block. Blocks still in use are reported on stderr
  // and left alone (their owners would otherwise free them twice).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Errors: ResourceExhausted naming the budget, the bytes in use and the
  // request, when the block does not fit in the budget (or the backing
  // allocator has no room even after the cache was emptied).
  absl::StatusOr<void*> Allocate(size_t bytes);
  // REQUIRES: `ptr` came from Allocate and was not freed since.
  void Deallocate(void* ptr);
  // Returns every cached (free) block to the backing allocator.
  void ReleaseCached();
  MemoryStats stats() const;
  const std::string& device_name() const { return device_name_; }

  // The size class of a request: multiples of 512 bytes up to 1 MiB, then
  // multiples of 1/8 of the enclosing power of two (at most 12.5% waste).
  static size_t RoundSize(size_t bytes);

 private:
  void ReleaseCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutOfBudget(size_t requested, size_t rounded, absl::string_view why) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string device_name_;
  const std::string budget_source_;
  mutable absl::Mutex mu_;
  std::unique_ptr<RawAllocator> raw_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, size_t> live_ ABSL_GUARDED_BY(mu_);    // block -> class size
  std::map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);  // class size -> blocks
  MemoryStats stats_ ABSL_GUARDED_BY(mu_);
};

// --gpu_memory: how much of a GPU a worker may use.
//   growth      allocate as needed, up to the whole GPU (TensorFlow's
//               set_memory_growth(True)); the default
//   fraction:F  at most F (0 < F <= 1) of the GPU's total memory
//               (per_process_gpu_memory_fraction)
//   limit_mb:M  at most M MiB per logical device (memory_limit of a
//               LogicalDeviceConfiguration)
// No policy allocates ahead: the budget is a cap, and memory is taken as the
// model needs it. With --virtual_devices=N, growth and fraction budgets are
// split evenly among the N logical devices of a GPU.
struct GpuMemoryPolicy {
  enum class Kind { kGrowth, kFraction, kLimit };
  Kind kind = Kind::kGrowth;
  double fraction = 1.0;
  int64_t limit_mb = 0;
  std::string text = "growth";  // as given, for messages
};

// Errors: InvalidArgument naming the flag and the accepted forms.
absl::StatusOr<GpuMemoryPolicy> ParseGpuMemoryPolicy(absl::string_view text);

// The budget of each of `virtual_devices` logical devices on a GPU with
// `total_bytes` of memory.
// Errors: InvalidArgument when limit_mb * virtual_devices exceeds the GPU.
absl::StatusOr<int64_t> LogicalDeviceBudget(const GpuMemoryPolicy& policy, int64_t total_bytes,
                                            int virtual_devices);

// "1.50 GiB (1610612736 bytes)"-style text for messages.
std::string HumanBytes(int64_t bytes);

}  // namespace pst::device

#endif  // PST_DEVICE_DEVICE_ALLOCATOR_H_
