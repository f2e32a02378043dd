// AdmissionFilter: the touch counts of a hash embedding's ids that have no
// row yet, in a fixed amount of memory, so that admission (a row made on
// the admit_after-th touch of an id) costs the same bytes however many ids
// a table sees. One filter per hash table (per partition on a ps).
//
// Two parts, as in TinyLFU (Einziger et al., "TinyLFU: A Highly Efficient
// Cache Admission Policy"), each `depth` rows, with half the bytes each:
//   - a doorkeeper: a Bloom filter of `depth` rows of `door_bytes * 8`
//     bits. An id's first touch sets its bits and counts 1. Most ids of a
//     long-tailed stream are touched once: they take 1 bit a row, not a
//     counter, which is what makes admit_after = 2 cheap.
//   - a count-min sketch with conservative update: `depth` rows of `width`
//     8-bit saturating counters counting the touches after the first. An
//     id's count is the least of its counters; a touch increments only
//     those of its counters equal to that least one.
// Every id maps to one bit and one counter per row by a fixed, seeded mix of
// the id (never absl::Hash, salted per process): the same in every process
// and on every machine, so a backup ps fed the same touches holds the same
// bytes. So:
//   - an estimate is never below the true count (up to kMaxCount): an id is
//     never admitted late, only sometimes early (when its bits, or its
//     counters, are all shared with other ids);
//   - with N touches counted, P(estimate > true + 1 + e * N / width) <=
//     e^-depth (the count-min bound; conservative update only lowers it);
//   - estimates saturate at kMaxCount (255): a threshold above it could
//     never be reached and is refused (CheckAdmitAfter). 8-bit counters
//     rather than 16: thresholds are small (2..10 in practice), and for a
//     byte budget 8 bits give twice the width, which halves the overcount
//     that makes early admissions; 255 is more than any threshold we know.
//
// The bits and counters are allocated on the first Add: a table that never
// counts (admit_after <= 1) holds only the geometry.
//
// Byte form (Serialize / Deserialize), integers little-endian:
//   offset  0  4 bytes  magic "PSAF"
//           4  1 byte   version (1)
//           5  1 byte   flags: bit 0 set = bits and counters follow; the
//                       others zero
//           6  2 bytes  depth (1..kMaxDepth)
//           8  8 bytes  width: counters per row (>= kMinWidth)
//          16  8 bytes  door_bytes: doorkeeper bytes per row (>= 1);
//                       depth * (width + door_bytes) <= kMaxBytes
//          24  with flag bit 0 only: depth * door_bytes bytes of doorkeeper,
//              row by row, bit i of a row in byte i / 8 at bit i % 8; then
//              depth * width counters, row by row
//        then  4 bytes  zlib crc32 of everything before it.
// A never allocated filter is the 28-byte short form.
//
// Thread-safety: thread-compatible. Const methods may run concurrently with
// each other; Add, Clear and assignment need exclusive access (the owner's
// lock, as for HashRowTable).
#ifndef PST_PS_SERVER_STORE_ADMISSION_FILTER_H_
#define PST_PS_SERVER_STORE_ADMISSION_FILTER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pst::ps {

namespace admission_filter_internal {

// Allocates in 2 MiB-aligned blocks and asks Linux for transparent huge
// pages on them (madvise), before the first write: a filter's touches land
// on random lines of tens of MiB, and with 4 KiB pages nearly every one is
// also a TLB miss. Elsewhere (or if the kernel says no) plain pages.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(runtime/explicit)
  T* allocate(size_t n);
  void deallocate(T* p, size_t n);
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

}  // namespace admission_filter_internal

class AdmissionFilter {
 public:
  using Counter = uint8_t;
  // Where an estimate saturates.
  static constexpr uint32_t kMaxCount = 255;
  static constexpr int kDefaultDepth = 4;
  static constexpr int kMaxDepth = 16;
  // The default of --admission_filter_bytes, per table per ps: 32 MiB (4
  // rows of 4 MiB of doorkeeper (32 Mi bits) and 4 Mi counters). It keeps
  // early admissions at admit_after = 2 under 1% of admissions for ~10M
  // distinct ids (docs/tables.md, bench/admission_filter_bench.cc).
  static constexpr int64_t kDefaultBytes = int64_t{32} << 20;
  // Each row holds at least this many counters (and as many bytes of bits).
  static constexpr int64_t kMinWidth = 1024;
  // Bytes at most (bits and counters, all rows): 64 GiB.
  static constexpr int64_t kMaxBytes = int64_t{1} << 36;
  // The byte form's header and trailer.
  static constexpr size_t kHeaderBytes = 24;
  static constexpr size_t kTrailerBytes = 4;

  // A filter of `bytes` (rounded down to what `depth` rows take): each row
  // of bytes / depth gives half its bytes to the doorkeeper and half to
  // counters. Nothing is allocated until the first Add. Errors:
  // InvalidArgument, naming --admission_filter_bytes, when `bytes` leaves a
  // row fewer than kMinWidth counters or is over kMaxBytes;
  // InvalidArgument for a depth outside 1..kMaxDepth.
  static absl::StatusOr<AdmissionFilter> Create(int64_t bytes, int depth = kDefaultDepth);

  // OK when a filter can decide `admit_after`: <= kMaxCount (any value <= 1
  // needs no counting). Else InvalidArgument naming `variable`.
  static absl::Status CheckAdmitAfter(int32_t admit_after, const std::string& variable);

  // Counts one touch of `id` (allocating on the first call); its estimate
  // after it: >= its true count, at most kMaxCount. Exactly 1 when the
  // doorkeeper proves this the first touch (a later Estimate may say more:
  // it reads the id's shared counters too).
  uint32_t Add(int64_t id);
  // The estimated touches of `id` so far (0 before any Add).
  uint32_t Estimate(int64_t id) const;
  // Forgets every count and frees the memory (the geometry stays).
  void Clear();
  // Takes `other`'s counts too: each bit set in either, each counter the
  // larger of the two, so every id's estimate is at least what either
  // filter says (a restore onto another partitioning merges the old
  // partitions' filters: never late, only earlier). InvalidArgument, with
  // nothing changed, for another geometry.
  absl::Status MergeMax(const AdmissionFilter& other);

  int depth() const { return depth_; }
  // Counters per row.
  int64_t width() const { return width_; }
  // Doorkeeper bytes per row (8 bits each).
  int64_t door_bytes() const { return door_bytes_; }
  bool allocated() const { return !counters_.empty(); }
  // Memory held: depth * (door_bytes + width) once allocated, else 0.
  int64_t bytes() const { return static_cast<int64_t>(door_.capacity() + counters_.capacity()); }

  // The byte form above; the header and crc alone while never allocated.
  std::string Serialize() const;
  // The filter a Serialize wrote. Errors: DataLoss for a blob cut short,
  // too long for its header, or whose crc does not match; InvalidArgument
  // for a bad magic, an unknown version or flag, or a geometry out of
  // range. Never crashes on any input (it may come over the network), and
  // allocates only what the blob's length holds.
  static absl::StatusOr<AdmissionFilter> Deserialize(std::string_view blob);

 private:
  AdmissionFilter(int depth, int64_t width, int64_t door_bytes)
      : depth_(depth), width_(width), door_bytes_(door_bytes) {}
  void Allocate();
  // Where `id` lives: its doorkeeper bit (an index into door_'s bits) and
  // its counter (an index into counters_) in each of the depth_ rows.
  void Locate(int64_t id, uint64_t* bits, size_t* slots) const;

  int depth_;
  int64_t width_;
  int64_t door_bytes_;
  template <typename T>
  using Array = std::vector<T, admission_filter_internal::HugePageAllocator<T>>;
  Array<uint8_t> door_;      // depth_ rows of door_bytes_; empty until Add
  Array<Counter> counters_;  // depth_ rows of width_; empty until Add
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_ADMISSION_FILTER_H_
