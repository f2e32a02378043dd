// How a hash embedding's partition is bounded (VariableSpec.capacity and
// .eviction; the job's --table_capacity and --table_eviction), checked
// where it is given (the flags, a spec model) and where it is used (the ps,
// ps_server/store/eviction_index.h) by the same rules.
//
// Policies, each over the table partition's own clock, its version (one
// tick per update applied to it):
//   lru        the row updated longest ago goes first;
//   lfu[:H]    the row updated least often goes first, each update's weight
//              halving every H versions (default kDefaultLfuHalfLife), so
//              that old favourites age out;
//   ttl:N      a row not updated for N versions goes, full or not; when
//              full, the row updated longest ago goes first (as lru).
// A capacity without a policy evicts as lru; a policy without a capacity
// (other than ttl) is refused, as it would never evict.
//
// Thread-safety: pure functions.
#ifndef PST_COMMON_TABLE_POLICY_H_
#define PST_COMMON_TABLE_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pst::common {

inline constexpr double kDefaultLfuHalfLife = 1000.0;

struct TablePolicy {
  enum class Eviction { kNone, kLru, kLfu, kTtl };
  Eviction eviction = Eviction::kNone;
  int64_t capacity = 0;  // rows; 0: unbounded
  int64_t ttl = 0;       // kTtl: versions a row may go without an update
  double lfu_half_life = kDefaultLfuHalfLife;  // kLfu, in versions

  bool bounded() const { return eviction != Eviction::kNone; }
};

// The policy of `capacity` rows and `eviction` ("", "lru", "lfu",
// "lfu:<half-life>", "ttl:<versions>"). Errors: InvalidArgument naming
// `what` (the flag or field) for a negative capacity, an unknown policy, a
// half-life or ttl that is not a positive number, or lru/lfu without a
// capacity.
absl::StatusOr<TablePolicy> ParseTablePolicy(int64_t capacity, absl::string_view eviction,
                                             absl::string_view what);

// "lru", "lfu:1000", "ttl:50", or "none": for logs and errors.
std::string DescribeTablePolicy(const TablePolicy& policy);

}  // namespace pst::common

#endif  // PST_COMMON_TABLE_POLICY_H_
