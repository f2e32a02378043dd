// The benchmark's cases on one cluster shape: dense push, pull and
// pushpull of every --sizes entry, and sparse pull and push of rows drawn
// from a Zipf law.
#ifndef PST_BENCH_CASES_H_
#define PST_BENCH_CASES_H_

#include <vector>

#include "absl/status/status.h"
#include "bench/case_runner.h"
#include "bench/ps_bench_options.h"

namespace pst::bench {

// One cluster shape: start the ps, create the variables, run every case,
// stop the ps. Appends a Result per case to `*results`; a failing case
// carries its error there. Errors: those of starting the ps or creating the
// variables; InvalidArgument for --ps_replicas=2 with fewer than 2 ps.
absl::Status RunConfig(const Options& options, int num_ps, int num_workers,
                       std::vector<Result>* results);

}  // namespace pst::bench

#endif  // PST_BENCH_CASES_H_
