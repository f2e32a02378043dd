// ps_bench's output: the table of the cases and the scaling comparison on
// stdout, and the same figures as JSON for scripts (--json).
#ifndef PST_BENCH_REPORT_H_
#define PST_BENCH_REPORT_H_

#include <vector>

#include "bench/case_runner.h"
#include "bench/ps_bench_options.h"
#include "bench/references.h"
#include "bench/scaling.h"
#include "nlohmann/json.hpp"

namespace pst::bench {

// The references' summary line, with the load average before and after.
void PrintReferences(const References& refs, double load_start, double load_end);

// A row per case, each GB/s also as a ratio to the one-stream TCP reference,
// then what the columns mean.
void PrintTable(const std::vector<Result>& results, const References& refs, const Options& options);

// The references, the settings and a result per case.
nlohmann::json ToJson(const std::vector<Result>& results, const References& refs,
                      const Options& options, double load_start, double load_end);

void PrintScaling(const std::vector<Scaling>& scalings, const Options& options);

// The "scaling" array of the JSON.
nlohmann::json ScalingJson(const std::vector<Scaling>& scalings, const Options& options);

}  // namespace pst::bench

#endif  // PST_BENCH_REPORT_H_
