#include "bench/ps_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/case_runner.h"
#include "bench/cases.h"
#include "bench/proc_stats.h"
#include "bench/references.h"
#include "bench/report.h"
#include "bench/scaling.h"
#include "nlohmann/json.hpp"

namespace pst::bench {

int RunPsBench(const Options& options) {
  if (access(options.ps_server.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "ps_bench: no ps_server binary at %s (build it, or pass --ps_server)\n",
                 options.ps_server.c_str());
    return 2;
  }
  const double load_start = LoadAverage();
  std::printf(
      "ps_bench: %u cpus, load average %.2f; cases %s; %.1f s per case (dense cases in %d "
      "rounds), at least %d op(s) per worker\n",
      std::thread::hardware_concurrency(), load_start, absl::StrJoin(options.cases, ",").c_str(),
      absl::ToDoubleSeconds(options.case_budget), options.rounds, options.min_iters);
  std::printf("references:\n");
  std::fflush(stdout);
  std::vector<int64_t> message_bytes;
  if (options.AnyDense()) {
    for (int64_t s : options.sizes) message_bytes.push_back(s * 4);
  } else {
    message_bytes.push_back(int64_t{64} << 20);
  }
  std::sort(message_bytes.begin(), message_bytes.end());
  message_bytes.erase(std::unique(message_bytes.begin(), message_bytes.end()), message_bytes.end());
  absl::StatusOr<References> refs = MeasureReferences(message_bytes, options.reference_budget);
  if (!refs.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", std::string(refs.status().message()).c_str());
    return 1;
  }

  std::vector<Result> results;
  for (int num_ps : options.ps_counts) {
    for (int num_workers : options.worker_counts) {
      absl::Status status = RunConfig(options, num_ps, num_workers, &results);
      if (!status.ok()) {
        Result r;
        r.op = "setup";
        r.ps = num_ps;
        r.workers = num_workers;
        r.error = std::string(status.message());
        std::fprintf(stderr, "ps_bench: %d ps, %d worker(s): %s\n", num_ps, num_workers,
                     r.error.c_str());
        results.push_back(std::move(r));
      }
    }
  }

  std::vector<Scaling> scalings;
  if (options.scaling) {
    for (const std::string& rate : {std::string(), options.scaling_link_rate}) {
      scalings.push_back(RunScaling(options, rate));
    }
  }

  const double load_end = LoadAverage();
  PrintReferences(*refs, load_start, load_end);
  PrintTable(results, *refs, options);
  if (!scalings.empty()) PrintScaling(scalings, options);
  bool failed = false;
  for (const Result& r : results) failed |= !r.error.empty();
  for (const Scaling& s : scalings) failed |= !s.error.empty();

  if (!options.json.empty()) {
    std::ofstream out(options.json);
    nlohmann::json j = ToJson(results, *refs, options, load_start, load_end);
    if (!scalings.empty()) j["scaling"] = ScalingJson(scalings, options);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "ps_bench: cannot write %s\n", options.json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", options.json.c_str());
  }
  return failed ? 1 : 0;
}

}  // namespace pst::bench
