// Placement policies: which ps holds each variable. Pure, deterministic
// functions of the variable list and the number of ps, so every process that
// computes a plan computes the same one; the chief computes it and sends it.
#ifndef PST_COMMON_PLACEMENT_H_
#define PST_COMMON_PLACEMENT_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// Round-robin in creation order, as TensorFlow's replica_device_setter does:
// variable i goes to ps i % num_ps.
// Errors: InvalidArgument if num_ps < 1 or two variables share a name.
absl::StatusOr<proto::PlacementPlan> PlaceRoundRobin(
    const std::vector<proto::VariableSpec>& variables, int num_ps);

// Greedy size-balanced: biggest first, each to the ps with the fewest bytes
// so far (ties: the lowest index); equal sizes are taken in name order, so
// the result does not depend on creation order (TensorFlow's greedy
// strategy does). Hash embeddings (shape[0] == 0) count as `hash_row_guess`
// rows. Errors: as PlaceRoundRobin.
absl::StatusOr<proto::PlacementPlan> PlaceSizeBalanced(
    const std::vector<proto::VariableSpec>& variables, int num_ps, int64_t hash_row_guess = 0);

// Gives every shard of `plan` (the variables of one ps_index) `replicas`
// copies: with 2, its primary on ps g and its backup on ps (g + 1) % num_ps,
// the next ps round the ring, so each ps holds one backup and losing any one
// ps leaves a copy of every shard. With 1, one copy (no backups).
// Errors: InvalidArgument for replicas other than 1 or 2, or 2 with fewer
// than 2 ps.
absl::Status ReplicateShards(int replicas, proto::PlacementPlan* plan);

// The ps serving shard `shard` of `plan`: its primary in a replicated plan
// (plan.shards, as moved by failovers), else the shard's own ps.
int PrimaryOf(const proto::PlacementPlan& plan, int shard);

// Whether ps `ps` holds a copy (primary or backup) of some shard of `plan`;
// every ps does in a plan with one copy.
bool HoldsACopy(const proto::PlacementPlan& plan, int ps);

// Bytes a spec takes (hash embeddings: hash_row_guess rows).
int64_t SpecBytes(const proto::VariableSpec& spec, int64_t hash_row_guess = 0);

// Bytes held by each ps under `plan`.
std::vector<int64_t> BytesPerPs(const proto::PlacementPlan& plan);

}  // namespace pst::common

#endif  // PST_COMMON_PLACEMENT_H_
