#include "ps_server/store/admission_filter.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"

namespace pst::ps {
namespace admission_filter_internal {

constexpr size_t kHugePage = size_t{2} << 20;

// Whole huge pages only (the default sizes are): other sizes take plain
// memory rather than round up.
inline bool UseHugePages(size_t bytes) { return bytes >= kHugePage && bytes % kHugePage == 0; }

template <typename T>
T* HugePageAllocator<T>::allocate(size_t n) {
  const size_t bytes = n * sizeof(T);
  if (!UseHugePages(bytes)) return std::allocator<T>().allocate(n);
  void* p = std::aligned_alloc(kHugePage, bytes);
  // Out of memory: what std::allocator does (an allocator must throw).
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: failure leaves plain pages
#endif
  return static_cast<T*>(p);
}

template <typename T>
void HugePageAllocator<T>::deallocate(T* p, size_t n) {
  if (UseHugePages(n * sizeof(T))) {
    std::free(p);
  } else {
    std::allocator<T>().deallocate(p, n);
  }
}

template struct HugePageAllocator<uint8_t>;

}  // namespace admission_filter_internal

namespace {

constexpr char kMagic[4] = {'P', 'S', 'A', 'F'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kFlagCounters = 1;

// One seed per row of counters (the first 16 splitmix64 outputs from seed
// 0) and per row of doorkeeper bits (the next 16): fixed, so every process
// and machine maps an id to the same bits and counters. Never absl::Hash,
// which is salted per process.
constexpr std::array<uint64_t, AdmissionFilter::kMaxDepth> kRowSeeds = {
    0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL, 0x06c45d188009454fULL, 0xf88bb8a8724c81ecULL,
    0x1b39896a51a8749bULL, 0x53cb9f0c747ea2eaULL, 0x2c829abe1f4532e1ULL, 0xc584133ac916ab3cULL,
    0x3ee5789041c98ac3ULL, 0xf3b8488c368cb0a6ULL, 0x657eecdd3cb13d09ULL, 0xc2d326e0055bdef6ULL,
    0x8621a03fe0bbdb7bULL, 0x8e1f7555983aa92fULL, 0xb54e0f1600cc4d19ULL, 0x84bb3f97971d80abULL};
constexpr std::array<uint64_t, AdmissionFilter::kMaxDepth> kDoorSeeds = {
    0x7d29825c75521255ULL, 0xc3cf17102b7f7f86ULL, 0x3466e9a083914f64ULL, 0xd81a8d2b5a4485acULL,
    0xdb01602b100b9ed7ULL, 0xa9038a921825f10dULL, 0xedf5f1d90dca2f6aULL, 0x54496ad67bd2634cULL,
    0xdd7c01d4f5407269ULL, 0x935e82f1db4c4f7bULL, 0x69b82ebc92233300ULL, 0x40d29eb57de1d510ULL,
    0xa2f09dabb45c6316ULL, 0xee521d7a0f4d3872ULL, 0xf16952ee72f3454fULL, 0x377d35dea8e40225ULL};

// The splitmix64 finalizer (Steele, Lea, Flood): a bijection on 64 bits
// whose output bits each depend on every input bit.
inline uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform index in [0, n) from a mixed hash: h * n / 2^64, no division.
inline uint64_t Reduce(uint64_t h, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64);
}

void PutLittleEndian(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLittleEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return v;
}

// InvalidArgument unless Create could have made this geometry (all three
// bounded, so the products below cannot overflow).
absl::Status CheckGeometry(uint64_t depth, uint64_t width, uint64_t door_bytes) {
  constexpr auto kMax = static_cast<uint64_t>(AdmissionFilter::kMaxBytes);
  if (depth < 1 || depth > AdmissionFilter::kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrCat("admission filter depth must be in 1..",
                                                   AdmissionFilter::kMaxDepth, ", got ", depth));
  }
  if (width < static_cast<uint64_t>(AdmissionFilter::kMinWidth) || width > kMax || door_bytes < 1 ||
      door_bytes > kMax || depth * (width + door_bytes) > kMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "admission filter of ", depth, " rows of ", width, " counters and ", door_bytes,
        " doorkeeper bytes: a row needs at least ", AdmissionFilter::kMinWidth,
        " counters and 1 byte, all at most ", kMax, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AdmissionFilter> AdmissionFilter::Create(int64_t bytes, int depth) {
  if (depth < 1 || depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("admission filter depth must be in 1..", kMaxDepth, ", got ", depth));
  }
  if (bytes < 2 * kMinWidth * depth || bytes > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--admission_filter_bytes=", bytes, " is out of range: a filter of ", depth,
                     " rows takes from ", 2 * kMinWidth * depth, " to ", kMaxBytes, " bytes"));
  }
  const int64_t row = bytes / depth;
  const int64_t door_bytes = row / 2;
  return AdmissionFilter(depth, row - door_bytes, door_bytes);
}

absl::Status AdmissionFilter::CheckAdmitAfter(int32_t admit_after, const std::string& variable) {
  if (admit_after > static_cast<int32_t>(kMaxCount)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hash variable '", variable, "': admit_after must be at most ", kMaxCount,
                     " (the admission filter's counts saturate there), got ", admit_after));
  }
  return absl::OkStatus();
}

void AdmissionFilter::Allocate() {
  door_.assign(static_cast<size_t>(depth_ * door_bytes_), 0);
  counters_.assign(static_cast<size_t>(depth_ * width_), 0);
}

void AdmissionFilter::Locate(int64_t id, uint64_t* bits, size_t* slots) const {
  const uint64_t row_bits = static_cast<uint64_t>(door_bytes_) * 8;
  const auto width = static_cast<uint64_t>(width_);
  for (int r = 0; r < depth_; ++r) {
    const auto u = static_cast<uint64_t>(r);
    const auto x = static_cast<uint64_t>(id);
    bits[r] = u * row_bits + Reduce(Mix64(x + kDoorSeeds[static_cast<size_t>(r)]), row_bits);
    slots[r] = static_cast<size_t>(u * width +
                                   Reduce(Mix64(x + kRowSeeds[static_cast<size_t>(r)]), width));
  }
}

uint32_t AdmissionFilter::Add(int64_t id) {
  if (!allocated()) Allocate();
  std::array<uint64_t, kMaxDepth> bits;
  std::array<size_t, kMaxDepth> slots;
  Locate(id, bits.data(), slots.data());
  // Every line this touch may read, asked for at once: the misses overlap
  // instead of coming one after another (most touches miss the caches).
  for (int r = 0; r < depth_; ++r) {
    __builtin_prefetch(&door_[bits[static_cast<size_t>(r)] >> 3], 1);
    __builtin_prefetch(&counters_[slots[static_cast<size_t>(r)]], 1);
  }
  // The doorkeeper: a first touch sets the id's bits and counts 1.
  bool seen = true;
  for (int r = 0; r < depth_; ++r) {
    const uint64_t bit = bits[static_cast<size_t>(r)];
    uint8_t& byte = door_[bit >> 3];
    const auto mask = static_cast<uint8_t>(1u << (bit & 7));
    if ((byte & mask) == 0) {
      seen = false;
      byte |= mask;
    }
  }
  if (!seen) return 1;
  // Later touches: the counters, conservative update (only those at the
  // least value grow; the others already count more than this id's).
  Counter least = std::numeric_limits<Counter>::max();
  for (int r = 0; r < depth_; ++r)
    least = std::min(least, counters_[slots[static_cast<size_t>(r)]]);
  if (least >= kMaxCount - 1) return kMaxCount;
  for (int r = 0; r < depth_; ++r) {
    Counter& c = counters_[slots[static_cast<size_t>(r)]];
    if (c == least) ++c;
  }
  return uint32_t{least} + 2;
}

uint32_t AdmissionFilter::Estimate(int64_t id) const {
  if (!allocated()) return 0;
  std::array<uint64_t, kMaxDepth> bits;
  std::array<size_t, kMaxDepth> slots;
  Locate(id, bits.data(), slots.data());
  Counter least = std::numeric_limits<Counter>::max();
  for (int r = 0; r < depth_; ++r) {
    const uint64_t bit = bits[static_cast<size_t>(r)];
    if ((door_[bit >> 3] & (1u << (bit & 7))) == 0) return 0;
    least = std::min(least, counters_[slots[static_cast<size_t>(r)]]);
  }
  return std::min(uint32_t{least} + 1, kMaxCount);
}

absl::Status AdmissionFilter::MergeMax(const AdmissionFilter& other) {
  if (other.depth_ != depth_ || other.width_ != width_ || other.door_bytes_ != door_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "admission filters of different sizes (", depth_, " x ", width_, " counters and ",
        other.depth_, " x ", other.width_, ") cannot be merged"));
  }
  if (!other.allocated()) return absl::OkStatus();
  if (!allocated()) Allocate();
  for (size_t i = 0; i < door_.size(); ++i) door_[i] |= other.door_[i];
  for (size_t i = 0; i < counters_.size(); ++i) {
    counters_[i] = std::max(counters_[i], other.counters_[i]);
  }
  return absl::OkStatus();
}

void AdmissionFilter::Clear() {
  Array<uint8_t>().swap(door_);
  Array<Counter>().swap(counters_);
}

std::string AdmissionFilter::Serialize() const {
  const size_t payload = door_.size() + counters_.size();
  std::string out(kHeaderBytes + payload + kTrailerBytes, '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  p[4] = static_cast<char>(kVersion);
  p[5] = static_cast<char>(allocated() ? kFlagCounters : 0);
  PutLittleEndian(static_cast<uint64_t>(depth_), 2, p + 6);
  PutLittleEndian(static_cast<uint64_t>(width_), 8, p + 8);
  PutLittleEndian(static_cast<uint64_t>(door_bytes_), 8, p + 16);
  if (allocated()) {
    std::memcpy(p + kHeaderBytes, door_.data(), door_.size());
    std::memcpy(p + kHeaderBytes + door_.size(), counters_.data(), counters_.size());
  }
  const uint32_t crc = common::ShardCrc32(out.data(), kHeaderBytes + payload);
  PutLittleEndian(crc, 4, p + kHeaderBytes + payload);
  return out;
}

absl::StatusOr<AdmissionFilter> AdmissionFilter::Deserialize(std::string_view blob) {
  if (blob.size() < kHeaderBytes + kTrailerBytes) {
    return absl::DataLossError(absl::StrCat("admission filter blob of ", blob.size(),
                                            " bytes is shorter than its ",
                                            kHeaderBytes + kTrailerBytes, "-byte header and crc"));
  }
  const char* p = blob.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("admission filter blob: bad magic (not a filter)");
  }
  const auto version = static_cast<uint8_t>(p[4]);
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("admission filter blob: unknown version ",
                                                   version, " (this build reads ", kVersion, ")"));
  }
  const auto flags = static_cast<uint8_t>(p[5]);
  if ((flags & ~kFlagCounters) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("admission filter blob: unknown flags ", flags));
  }
  const uint64_t depth = GetLittleEndian(p + 6, 2);
  const uint64_t width = GetLittleEndian(p + 8, 8);
  const uint64_t door_bytes = GetLittleEndian(p + 16, 8);
  // The geometry (bounded), then the length, before anything is allocated.
  if (absl::Status s = CheckGeometry(depth, width, door_bytes); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("admission filter blob: ", s.message()));
  }
  const bool held = (flags & kFlagCounters) != 0;
  const size_t door_size = held ? static_cast<size_t>(depth * door_bytes) : 0;
  const size_t counters_size = held ? static_cast<size_t>(depth * width) : 0;
  const size_t want = kHeaderBytes + door_size + counters_size + kTrailerBytes;
  if (blob.size() != want) {
    return absl::DataLossError(absl::StrCat("admission filter blob of ", blob.size(),
                                            " bytes; its header (", depth, " rows of ", width,
                                            " counters and ", door_bytes, " doorkeeper bytes",
                                            (held ? "" : ", none held"), ") says ", want));
  }
  const size_t payload = door_size + counters_size;
  const uint32_t crc = common::ShardCrc32(p, kHeaderBytes + payload);
  const auto stored = static_cast<uint32_t>(GetLittleEndian(p + kHeaderBytes + payload, 4));
  if (crc != stored) {
    return absl::DataLossError(
        absl::StrCat("admission filter blob: crc ", stored, " does not match its contents' ", crc));
  }
  AdmissionFilter filter(static_cast<int>(depth), static_cast<int64_t>(width),
                         static_cast<int64_t>(door_bytes));
  if (held) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(p + kHeaderBytes);
    filter.door_.assign(bytes, bytes + door_size);
    filter.counters_.assign(bytes + door_size, bytes + payload);
  }
  return filter;
}

}  // namespace pst::ps
