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

// The dense variable of `size` floats.
std::string DenseName(int64_t size);

// The dense variables (if a dense case runs) and the table (if a sparse case
// runs) of `options`, placed on `num_ps` ps.
// Errors: those of common::SplitDense, SplitVariable and the placement.
absl::StatusOr<proto::PlacementPlan> BuildPlan(const Options& options, int num_ps);

// Bytes of all of `plan`'s variables (float32).
int64_t PlanBytes(const proto::PlacementPlan& plan);

}  // namespace pst::bench

#endif  // PST_BENCH_PLAN_H_
