#include "common/placement.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_util.h"

namespace pst::common {
namespace {

// Both placements reject the same inputs.
absl::Status CheckPlacementInput(const std::vector<proto::VariableSpec>& variables, int num_ps) {
  if (num_ps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement needs at least one ps, got ", num_ps));
  }
  absl::flat_hash_set<std::string_view> names;
  for (const proto::VariableSpec& spec : variables) {
    if (!names.insert(spec.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable name '", spec.name(), "' is used twice"));
    }
  }
  return absl::OkStatus();
}

// a + b for non-negative a and b, saturated at INT64_MAX.
int64_t SaturatingAdd(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

}  // namespace

absl::StatusOr<proto::PlacementPlan> PlaceRoundRobin(
    const std::vector<proto::VariableSpec>& variables, int num_ps) {
  if (absl::Status s = CheckPlacementInput(variables, num_ps); !s.ok()) return s;
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  plan.set_policy("round_robin");
  for (size_t i = 0; i < variables.size(); ++i) {
    proto::PlacementPlan::Entry* entry = plan.add_variables();
    *entry->mutable_spec() = variables[i];
    entry->set_ps_index(static_cast<int>(i % num_ps));
  }
  return plan;
}

absl::StatusOr<proto::PlacementPlan> PlaceSizeBalanced(
    const std::vector<proto::VariableSpec>& variables, int num_ps, int64_t hash_row_guess) {
  if (absl::Status s = CheckPlacementInput(variables, num_ps); !s.ok()) return s;

  std::vector<int64_t> bytes(variables.size());
  for (size_t i = 0; i < variables.size(); ++i) bytes[i] = SpecBytes(variables[i], hash_row_guess);

  // Biggest first; equal sizes in name order (names are unique, so the order
  // is total and does not depend on the input order).
  std::vector<size_t> order(variables.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bytes[a] != bytes[b]) return bytes[a] > bytes[b];
    return variables[a].name() < variables[b].name();
  });

  // Min-heap of (bytes so far, ps index): the top is the least-loaded ps,
  // the lowest index among equals.
  using Load = std::pair<int64_t, int>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (int ps = 0; ps < num_ps; ++ps) loads.push({0, ps});
  std::vector<int> ps_of(variables.size(), 0);
  for (size_t i : order) {
    Load least = loads.top();
    loads.pop();
    ps_of[i] = least.second;
    loads.push({SaturatingAdd(least.first, bytes[i]), least.second});
  }

  // The plan lists the variables in their input (creation) order.
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  plan.set_policy("size_balanced");
  for (size_t i = 0; i < variables.size(); ++i) {
    proto::PlacementPlan::Entry* entry = plan.add_variables();
    *entry->mutable_spec() = variables[i];
    entry->set_ps_index(ps_of[i]);
  }
  return plan;
}

// float32 is the only dtype, so 4 bytes an element. A hash embedding
// (shape[0] == 0) counts as max(hash_row_guess, 0) rows. A shape that has no
// valid element count (a negative dimension, or bytes beyond int64) counts 0:
// the ps rejects such a spec anyway.
int64_t SpecBytes(const proto::VariableSpec& spec, int64_t hash_row_guess) {
  Shape shape = spec.shape();
  if (!shape.empty() && shape[0] == 0) shape[0] = std::max<int64_t>(0, hash_row_guess);
  constexpr int64_t kBytesPerElement = sizeof(float);
  absl::StatusOr<int64_t> n = NumElements(shape, INT64_MAX / kBytesPerElement);
  return n.ok() ? *n * kBytesPerElement : 0;
}

// Counts each spec as SpecBytes(spec) with no row guess: hash embeddings
// count 0 rows, the bytes the ps allocates for them when it creates them.
std::vector<int64_t> BytesPerPs(const proto::PlacementPlan& plan) {
  std::vector<int64_t> bytes(std::max(plan.num_ps(), 0), 0);
  for (const auto& entry : plan.variables()) {
    if (entry.ps_index() >= 0 && entry.ps_index() < plan.num_ps()) {
      bytes[entry.ps_index()] = SaturatingAdd(bytes[entry.ps_index()], SpecBytes(entry.spec()));
    }
  }
  return bytes;
}

absl::Status ReplicateShards(int replicas, proto::PlacementPlan* plan) {
  plan->clear_shards();
  plan->clear_replicas();
  if (replicas == 1) return absl::OkStatus();
  if (replicas != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_replicas=", replicas, ": 1 or 2 copies of each shard are supported"));
  }
  const int num_ps = plan->num_ps();
  if (num_ps < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_replicas=2 puts each shard's backup on another ps, and this cluster has ", num_ps,
        " ps: give it at least 2"));
  }
  plan->set_replicas(2);
  for (int g = 0; g < num_ps; ++g) {
    proto::ShardCopies* copies = plan->add_shards();
    copies->set_primary(g);
    copies->set_backup((g + 1) % num_ps);
  }
  return absl::OkStatus();
}

int PrimaryOf(const proto::PlacementPlan& plan, int shard) {
  if (plan.replicas() != 2 || shard < 0 || shard >= plan.shards_size()) return shard;
  return plan.shards(shard).primary();
}

bool HoldsACopy(const proto::PlacementPlan& plan, int ps) {
  if (plan.replicas() != 2) return true;
  for (const proto::ShardCopies& copies : plan.shards()) {
    if (copies.primary() == ps || copies.backup() == ps) return true;
  }
  return false;
}

}  // namespace pst::common
