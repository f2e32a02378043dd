// The model the benchmark places on the ps: one dense variable per --sizes
// entry and one embedding table, placed as the chief places a model's.
#ifndef PST_BENCH_PLAN_H_
#define PST_BENCH_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "bench/ps_bench_options.h"
#include "proto/pstrain.pb.h"

namespace pst::bench {

// The embedding table of the sparse cases.
inline constexpr char kTable[] = "bench_table";

// The hash embeddings of the hash cases: unbounded, and bounded.
inline constexpr char kHashTable[] = "bench_hash";
inline constexpr char kHashTableEvict[] = "bench_hash_evict";

// The dense variable of `size` floats.
std::string DenseName(int64_t size);

// The dense variables (if a dense case runs) and the table (if a sparse case
// runs) of `options`, placed on `num_ps` ps.
// Errors: those of common::SplitDense, SplitVariable and the placement.
absl::StatusOr<proto::PlacementPlan> BuildPlan(const Options& options, int num_ps);

// Adds a hash embedding `name` of `dim` floats per row to `plan`, in one
// partition per ps (partition p on ps p, as the chief places one), each
// holding at most `capacity` rows under `eviction` (0 and "": unbounded).
// Errors: those of common::SplitVariable.
absl::Status AddHashTable(const std::string& name, int dim, int64_t capacity,
                          const std::string& eviction, proto::PlacementPlan* plan);

// Bytes of all of `plan`'s variables (float32).
int64_t PlanBytes(const proto::PlacementPlan& plan);

}  // namespace pst::bench

#endif  // PST_BENCH_PLAN_H_
