// ps_bench: the data plane's benchmark. Starts P real ps_server processes
// (the binary next to this one) on free 127.0.0.1 ports, creates dense
// variables and an embedding table on them, and runs W workers, each with
// its own PsClient over the gRPC transport that workers use: threads of
// this process, or (the dense cases, --workers_as) processes of their own
// (worker_processes.h):
//
//   push, pull, pushpull   S floats of dense variables, split over the ps
//   sparse_pull/push       R rows of dim D of an N-row table (mod routing),
//                          ids drawn from a Zipf(s) law
//
// For each case it prints GB/s of payload (bytes pushed plus bytes pulled;
// 1 GB = 1e9 bytes), p50/p99 latency of one operation, rows/s for sparse
// cases, and the CPU seconds the ps processes spent per GB moved. In the
// same run it measures references on this machine: a plain TCP stream over
// loopback (one connection and four) moving the same messages, and memcpy.
// Every result is also given as a ratio to the one-stream TCP reference.
// --json writes everything for scripts.
//
// A failing case (a message over the gRPC limit, a deadline) is reported in
// its row and the run goes on; ps_bench exits 1 if any case failed.
#ifndef PST_BENCH_PS_BENCH_H_
#define PST_BENCH_PS_BENCH_H_

#include "bench/ps_bench_options.h"

namespace pst::bench {

// Runs the benchmark of `options` and prints its results (and writes the
// JSON if options.json is set). Returns the exit status: 0; 1 if a case,
// a reference or writing the JSON failed; 2 if options.ps_server is not an
// executable.
int RunPsBench(const Options& options);

}  // namespace pst::bench

#endif  // PST_BENCH_PS_BENCH_H_
