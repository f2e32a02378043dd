#include "common/table_policy.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pst::common {

absl::StatusOr<TablePolicy> ParseTablePolicy(int64_t capacity, absl::string_view eviction,
                                             absl::string_view what) {
  TablePolicy policy;
  if (capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the capacity must be >= 0 rows (0: unbounded), got ", capacity));
  }
  policy.capacity = capacity;
  const std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(eviction, absl::MaxSplits(':', 1));
  const absl::string_view name = parts.first, arg = parts.second;
  const bool has_arg = eviction.find(':') != absl::string_view::npos;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": eviction '", eviction, "' ", why,
                                                   " (lru, lfu, lfu:<half-life>, ttl:<versions>)"));
  };
  if (eviction.empty()) {
    policy.eviction = capacity > 0 ? TablePolicy::Eviction::kLru : TablePolicy::Eviction::kNone;
    return policy;
  }
  if (name == "lru" && !has_arg) {
    policy.eviction = TablePolicy::Eviction::kLru;
  } else if (name == "lfu") {
    policy.eviction = TablePolicy::Eviction::kLfu;
    if (has_arg && (!absl::SimpleAtod(arg, &policy.lfu_half_life) ||
                    !std::isfinite(policy.lfu_half_life) || policy.lfu_half_life <= 0)) {
      return bad("needs a positive half-life in versions after 'lfu:'");
    }
  } else if (name == "ttl") {
    policy.eviction = TablePolicy::Eviction::kTtl;
    if (!has_arg || !absl::SimpleAtoi(arg, &policy.ttl) || policy.ttl < 1) {
      return bad("needs a positive number of versions after 'ttl:'");
    }
    return policy;
  } else {
    return bad("is not a policy");
  }
  if (capacity == 0) {
    return bad("needs a capacity (without one it never evicts)");
  }
  return policy;
}

std::string DescribeTablePolicy(const TablePolicy& policy) {
  switch (policy.eviction) {
    case TablePolicy::Eviction::kLru:
      return "lru";
    case TablePolicy::Eviction::kLfu:
      return absl::StrCat("lfu:", policy.lfu_half_life);
    case TablePolicy::Eviction::kTtl:
      return absl::StrCat("ttl:", policy.ttl);
    case TablePolicy::Eviction::kNone:
      break;
  }
  return "none";
}

}  // namespace pst::common
