// One benchmark case: W workers (threads here, or worker_processes.h's
// processes) each running an operation against the ps for a time budget,
// and the figures of the case (Result) from what they measured.
#ifndef PST_BENCH_CASE_RUNNER_H_
#define PST_BENCH_CASE_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/ps_cluster.h"

namespace pst::bench {

// A case's figures: one row of the table, one entry of the JSON.
struct Result {
  std::string op;
  int64_t size_floats = 0;  // dense
  std::string wire;         // dense: float32, bf16 or topk:RATIO
  // How the workers ran: "threads" of ps_bench, sharing its process, or
  // "processes" of their own (--workers_as).
  std::string workers_as = "threads";
  int rows = 0, dim = 0;    // sparse
  int64_t table_rows = 0;
  int ps = 0, workers = 0;
  int64_t ops = 0;
  double seconds = 0;
  double bytes = 0;
  double gbps = 0;
  double rows_per_s = 0;         // sparse: ids requested per second (repeats included)
  double unique_rows_per_s = 0;  // sparse: distinct rows moved per second
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double ps_cpu_s_per_gb = 0;
  double client_cpu_s_per_gb = 0;  // the workers' CPU: ps_bench's, or its worker processes'
  int64_t ps_rss_bytes = 0;
  // hash cases: the id batches per worker (pushed in turn), the distinct
  // ids they touch, each partition's
  // capacity (0: unbounded), the rows the ps evicted during the timed
  // operations and per second of them, and (hash_push_evict) rows/s as a
  // ratio of hash_push's, measured in alternate rounds.
  int hash_batches = 0;
  int64_t distinct_ids = 0;
  int64_t capacity = 0;
  std::string eviction;
  bool disk_tier = false;  // the rows past the capacity on disk (--table_store_dir)
  int64_t evictions = 0;
  double evictions_per_s = 0;
  double ratio_to_unbounded = 0;
  std::string error;
  // Summed over a case's rounds, until FinishResult.
  std::vector<double> latencies_ms;
  double ps_cpu_s = 0;
  bool ps_cpu_known = true;
  double client_cpu_s = 0;
};

// The bytes one operation moved, or its error.
using Op = std::function<absl::StatusOr<double>()>;

// Runs `ops[w]` on W threads: one warm-up each, then together until
// `budget` is spent and each has done `min_iters`. Adds the operations,
// bytes, time and CPU to `*result` (a case run in rounds adds each);
// FinishResult then computes the figures.
void RunCase(PsCluster& cluster, std::vector<Op>& ops, absl::Duration budget, int min_iters,
             Result* result);

// What one timed run of a case measured: each worker's latencies and bytes,
// its span, the ps's CPU over it (or why unknown) and the workers'.
struct TimedRun {
  std::vector<std::vector<double>> latencies_ms;
  double bytes = 0;
  double seconds = 0;
  absl::StatusOr<double> ps_cpu_s = 0.0;
  double client_cpu_s = 0;
};

// What every run of a case (RunCase's, and worker processes') shares:
// BeginRun sets the result's shape and says whether to run (false: the
// case failed before, or a ps stopped, into result->error); FailRun records
// `error` and the end of a ps that stopped, if one did; CpuBetween is the
// ps's CPU between two readings, or the error of one; AddRun adds `run` to
// `*result`, with the ps's memory now.
bool BeginRun(PsCluster& cluster, int num_workers, Result* result);
void FailRun(PsCluster& cluster, std::string error, Result* result);
absl::StatusOr<double> CpuBetween(const absl::StatusOr<double>& before,
                                  const absl::StatusOr<double>& after);
void AddRun(const PsCluster& cluster, TimedRun run, Result* result);

// The figures of a case from what its rounds added up.
void FinishResult(Result* result);

}  // namespace pst::bench

#endif  // PST_BENCH_CASE_RUNNER_H_
