#include "device/device_allocator.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pst::device {
namespace {

// A backing allocator that counts what it hands out and can be made to fail
// above a capacity, like a GPU with little free memory.
class FakeRawAllocator : public RawAllocator {
 public:
  struct Counters {
    int64_t allocs = 0;
    int64_t frees = 0;
    int64_t bytes_held = 0;
  };
  FakeRawAllocator(Counters* counters, int64_t capacity)
      : counters_(counters), capacity_(capacity) {}
  absl::StatusOr<void*> Alloc(size_t bytes) override {
    if (counters_->bytes_held + static_cast<int64_t>(bytes) > capacity_) {
      return absl::ResourceExhaustedError("fake device is full");
    }
    ++counters_->allocs;
    counters_->bytes_held += static_cast<int64_t>(bytes);
    return std::malloc(bytes);
  }
  void Free(void* ptr, size_t bytes) override {
    ++counters_->frees;
    counters_->bytes_held -= static_cast<int64_t>(bytes);
    std::free(ptr);
  }

 private:
  Counters* counters_;
  int64_t capacity_;
};

constexpr int64_t kMiB = int64_t{1} << 20;

std::unique_ptr<CachingAllocator> MakeAllocator(FakeRawAllocator::Counters* c, int64_t budget,
                                                int64_t capacity = INT64_MAX) {
  return std::make_unique<CachingAllocator>(
      "GPU:0", std::make_unique<FakeRawAllocator>(c, capacity), budget, "--gpu_memory=limit_mb:4");
}

TEST(CachingAllocatorTest, RoundSize_ClassesBoundWaste) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((1 << 20) + 1), (size_t{1} << 20) + (1 << 17));
  for (size_t bytes : {size_t{3000000}, size_t{123456789}, size_t{1} << 33}) {
    const size_t r = CachingAllocator::RoundSize(bytes);
    EXPECT_GE(r, bytes);
    EXPECT_LE(r, bytes + bytes / 8);
  }
}

TEST(CachingAllocatorTest, Allocate_FreedBlockIsReusedWithoutBackingCall) {
  FakeRawAllocator::Counters c;
  auto alloc = MakeAllocator(&c, 4 * kMiB);
  absl::StatusOr<void*> a = alloc->Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  alloc->Deallocate(*a);
  absl::StatusOr<void*> b = alloc->Allocate(900);  // same class (1024)
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(c.allocs, 1);
  const MemoryStats s = alloc->stats();
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.num_raw_allocs, 1);
  EXPECT_EQ(s.bytes_in_use, 1024);
  alloc->Deallocate(*b);
}

TEST(CachingAllocatorTest, Stats_TrackInUsePeakAndReserved) {
  FakeRawAllocator::Counters c;
  auto alloc = MakeAllocator(&c, 4 * kMiB);
  void* a = *alloc->Allocate(kMiB);
  void* b = *alloc->Allocate(kMiB);
  alloc->Deallocate(a);
  MemoryStats s = alloc->stats();
  EXPECT_EQ(s.bytes_in_use, kMiB);
  EXPECT_EQ(s.peak_bytes_in_use, 2 * kMiB);
  EXPECT_EQ(s.bytes_reserved, 2 * kMiB);  // `a` is cached
  EXPECT_EQ(s.bytes_limit, 4 * kMiB);
  EXPECT_EQ(s.num_live_blocks, 1);
  alloc->Deallocate(b);
  alloc->ReleaseCached();
  s = alloc->stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.bytes_reserved, 0);
  EXPECT_EQ(c.bytes_held, 0);
  EXPECT_EQ(c.frees, 2);
}

TEST(CachingAllocatorTest, Allocate_OverBudget_ResourceExhaustedNamesBudgetInUseAndRequest) {
  FakeRawAllocator::Counters c;
  auto alloc = MakeAllocator(&c, 4 * kMiB);
  void* a = *alloc->Allocate(3 * kMiB);
  absl::StatusOr<void*> b = alloc->Allocate(2 * kMiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(b.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "GPU:0")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "2.00 MiB (2097152 bytes)")) << msg;  // the request
  EXPECT_TRUE(absl::StrContains(msg, "3.00 MiB (3145728 bytes) in use")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "budget of 4.00 MiB")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "--gpu_memory=limit_mb:4")) << msg;
  // Nothing changed, and the backing allocator was never asked.
  EXPECT_EQ(alloc->stats().bytes_in_use, 3 * kMiB);
  EXPECT_EQ(c.allocs, 1);
  alloc->Deallocate(a);
}

TEST(CachingAllocatorTest, Allocate_NeverHoldsMoreThanBudget_ReleasesCacheFirst) {
  FakeRawAllocator::Counters c;
  auto alloc = MakeAllocator(&c, 4 * kMiB);
  // Fill the budget with cached blocks of one class, then ask for another.
  void* a = *alloc->Allocate(2 * kMiB);
  void* b = *alloc->Allocate(2 * kMiB);
  alloc->Deallocate(a);
  alloc->Deallocate(b);
  EXPECT_EQ(alloc->stats().bytes_reserved, 4 * kMiB);
  absl::StatusOr<void*> big = alloc->Allocate(3 * kMiB);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_LE(c.bytes_held, 4 * kMiB);
  EXPECT_EQ(alloc->stats().bytes_reserved, 3 * kMiB);
  EXPECT_LE(alloc->stats().peak_bytes_reserved, 4 * kMiB);
  alloc->Deallocate(*big);
}

TEST(CachingAllocatorTest, Allocate_BackingAllocatorFull_RetriesAfterReleasingCache) {
  FakeRawAllocator::Counters c;
  // The budget is large but the "device" holds only 3 MiB.
  auto alloc = MakeAllocator(&c, 64 * kMiB, 3 * kMiB);
  void* a = *alloc->Allocate(2 * kMiB);
  alloc->Deallocate(a);  // cached
  absl::StatusOr<void*> b = alloc->Allocate(3 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  alloc->Deallocate(*b);
  void* d = *alloc->Allocate(2 * kMiB + 1);  // another class; cache holds 3 MiB
  absl::StatusOr<void*> e = alloc->Allocate(2 * kMiB);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(e.status().message(), "fake device is full")) << e.status();
  alloc->Deallocate(d);
}

TEST(CachingAllocatorTest, Destructor_ReturnsCachedBlocks) {
  FakeRawAllocator::Counters c;
  {
    auto alloc = MakeAllocator(&c, 4 * kMiB);
    std::vector<void*> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(*alloc->Allocate(1000 * (i + 1)));
    for (void* p : blocks) alloc->Deallocate(p);
  }
  EXPECT_EQ(c.allocs, 5);
  EXPECT_EQ(c.frees, 5);
  EXPECT_EQ(c.bytes_held, 0);
}

TEST(GpuMemoryPolicyTest, Parse_AcceptedForms) {
  absl::StatusOr<GpuMemoryPolicy> p = ParseGpuMemoryPolicy("growth");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, GpuMemoryPolicy::Kind::kGrowth);
  p = ParseGpuMemoryPolicy("fraction:0.5");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, GpuMemoryPolicy::Kind::kFraction);
  EXPECT_DOUBLE_EQ(p->fraction, 0.5);
  p = ParseGpuMemoryPolicy("limit_mb:1024");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, GpuMemoryPolicy::Kind::kLimit);
  EXPECT_EQ(p->limit_mb, 1024);
}

TEST(GpuMemoryPolicyTest, Parse_BadForms_InvalidArgument) {
  for (const char* bad : {"fraction:0", "fraction:1.5", "fraction:x", "limit_mb:0", "limit_mb:-5",
                          "limit_mb:", "all", "growth:1"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<GpuMemoryPolicy> p = ParseGpuMemoryPolicy(bad);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(p.status().message(), "--gpu_memory")) << p.status();
  }
}

TEST(GpuMemoryPolicyTest, LogicalDeviceBudget_SplitsAmongVirtualDevices) {
  const int64_t total = 80 * 1024 * kMiB;
  EXPECT_EQ(*LogicalDeviceBudget(*ParseGpuMemoryPolicy("growth"), total, 1), total);
  EXPECT_EQ(*LogicalDeviceBudget(*ParseGpuMemoryPolicy("growth"), total, 2), total / 2);
  EXPECT_EQ(*LogicalDeviceBudget(*ParseGpuMemoryPolicy("fraction:0.5"), total, 2), total / 4);
  EXPECT_EQ(*LogicalDeviceBudget(*ParseGpuMemoryPolicy("limit_mb:1000"), total, 4), 1000 * kMiB);
  absl::StatusOr<int64_t> too_big =
      LogicalDeviceBudget(*ParseGpuMemoryPolicy("limit_mb:50000"), total, 2);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::device
