// ps_bench's command line: its flags, read into pst::bench::OptionFlags
// for the library (bench/ps_bench.h says what it measures).
#include <cstdio>
#include <exception>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "bench/ps_bench.h"
#include "bench/ps_bench_options.h"
#include "bench/worker_process.h"
#include "rpc/grpc_channel.h"
#include "common/process.h"
#include "flags/command_line.h"

ABSL_FLAG(std::string, ps, "1",
          "Number of ps processes; a comma list (e.g. 1,2) runs every case for each.");
ABSL_FLAG(std::string, workers, "1",
          "Number of workers; a comma list runs every case for each (crossed with --ps).");
ABSL_FLAG(std::string, workers_as, "threads,processes",
          "How the dense cases' workers run: threads of this process, sharing it, or processes "
          "of their own, each with its own connections, as a real cluster's workers are; a "
          "comma list runs each dense case in each, in the same rounds. The sparse and hash "
          "cases run threads.");
ABSL_FLAG(int, worker_channel_fd, -1,
          "Internal: run as one of a ps_bench's worker processes, driven over this file "
          "descriptor (--workers_as=processes starts them).");
ABSL_FLAG(std::string, sizes, "1M,16M,64M",
          "Dense cases: floats per operation, summed over the ps (K = 2^10, M = 2^20).");
ABSL_FLAG(int, rows, 4096, "Sparse cases: ids per operation (repeats included).");
ABSL_FLAG(int, dim, 64, "Sparse cases: width of a table row.");
ABSL_FLAG(int64_t, table_rows, 1'000'000, "Sparse cases: rows in the table.");
ABSL_FLAG(double, zipf_s, 1.1, "Sparse cases: exponent of the Zipf law the ids follow.");
ABSL_FLAG(double, seconds_per_case, 3, "Time budget of each case (after one warm-up operation).");
ABSL_FLAG(int, min_iters, 3, "Operations per worker per case at least, whatever the time budget.");
ABSL_FLAG(int, rounds, 3,
          "Dense cases run in this many rounds, every size and op once per round with its share "
          "of --seconds_per_case, so that a change of load during the run falls on each size "
          "alike; a case's figures add up its rounds.");
ABSL_FLAG(double, reference_seconds, 2.5,
          "Time budget of each TCP reference (shared by its 5 runs) and of memcpy.");
ABSL_FLAG(std::string, cases, "push,pull,pushpull,sparse_pull,sparse_push",
          "Cases to run, a comma list of push, pull, pushpull, sparse_pull, sparse_push, "
          "hash_push, hash_push_evict (the hash cases run in alternate rounds).");
ABSL_FLAG(std::string, json, "", "Also write the results to this JSON file.");
ABSL_FLAG(std::string, ps_server, "",
          "Path of the ps_server binary (default: the one next to ps_bench).");
ABSL_FLAG(double, rpc_timeout_s, 300, "Deadline of one operation.");
ABSL_FLAG(int64_t, dense_piece_bytes, 512 << 10,
          "Dense variables are cut into pieces of at most this many bytes, as the chief's "
          "--dense_piece_bytes does; 0: never cut (one variable per ps).");
ABSL_FLAG(bool, bdp_probe, true,
          "As the daemons' --bdp_probe: false runs the ps processes and this benchmark's "
          "dense connections with a fixed 16 MiB HTTP/2 window instead of gRPC's BDP "
          "probing.");
ABSL_FLAG(std::string, link_rate, "",
          "Put each ps in a network namespace of its own, behind a veth pair shaped to this "
          "rate each way (tc tbf, e.g. 2gbit), as if every ps were a machine with that NIC. "
          "Needs root and iproute2. Empty: every ps on loopback.");
ABSL_FLAG(int, ps_replicas, 1,
          "Copies of each ps's shard, as the chief's --ps_replicas: 2 creates each ps's "
          "variables with a backup on the next ps, which the primary forwards every push to "
          "before it answers (needs --ps of 2 or more). With --link_rate the ps reach each "
          "other through their shaped links, as machines of their own would.");
ABSL_FLAG(bool, scaling, true,
          "After the cases, measure what a second ps buys: PushPull of --scaling_size floats by "
          "2 workers against 1 ps, then 2 ps, on loopback and (as root, with iproute2) with "
          "each ps behind a link of --scaling_link_rate, as on machines of their own.");
ABSL_FLAG(std::string, scaling_size, "16M", "Floats per PushPull in the scaling comparison.");
ABSL_FLAG(std::string, scaling_link_rate, "2gbit",
          "Rate of each ps's link in the shaped scaling comparison (tc syntax).");
ABSL_FLAG(bool, verbose, false, "Echo the ps processes' log lines.");
ABSL_FLAG(std::string, wire, "float32",
          "Dense cases: how gradients and values travel, a comma list of float32, bf16 (both "
          "ways) and topk:RATIO (pushes of the top RATIO of each gradient, error feedback; "
          "float32 values). Each dense case runs in each, in the same rounds, and the others "
          "are reported as ratios of float32's rate.");
ABSL_FLAG(double, hash_capacity_fraction, 0.25,
          "hash_push_evict: the table's capacity as a share of the distinct ids the workers' "
          "batches touch (split evenly over its partitions, one per ps).");
ABSL_FLAG(int, hash_batches, 32,
          "hash cases: id batches drawn per worker (--rows ids each) and pushed in turn; the "
          "bounded table's capacity is a share of their distinct ids, so more batches make "
          "larger tables (whose rows no longer fit the CPU caches).");
ABSL_FLAG(std::string, hash_eviction, "lru",
          "hash_push_evict: the table's eviction policy (lru, lfu, lfu:<half-life>, "
          "ttl:<versions>).");
ABSL_FLAG(std::string, table_store_dir, "",
          "hash_push_evict: each ps keeps the bounded table's rows past its capacity on disk, "
          "under this directory's ps<i> (ps_server --table_store_dir; emptied as the ps "
          "starts). Empty: evicted rows are forgotten.");

namespace {

pst::bench::OptionFlags ReadFlags() {
  pst::bench::OptionFlags flags;
  flags.ps = absl::GetFlag(FLAGS_ps);
  flags.workers = absl::GetFlag(FLAGS_workers);
  flags.workers_as = absl::GetFlag(FLAGS_workers_as);
  flags.sizes = absl::GetFlag(FLAGS_sizes);
  flags.rows = absl::GetFlag(FLAGS_rows);
  flags.dim = absl::GetFlag(FLAGS_dim);
  flags.table_rows = absl::GetFlag(FLAGS_table_rows);
  flags.zipf_s = absl::GetFlag(FLAGS_zipf_s);
  flags.seconds_per_case = absl::GetFlag(FLAGS_seconds_per_case);
  flags.min_iters = absl::GetFlag(FLAGS_min_iters);
  flags.rounds = absl::GetFlag(FLAGS_rounds);
  flags.reference_seconds = absl::GetFlag(FLAGS_reference_seconds);
  flags.cases = absl::GetFlag(FLAGS_cases);
  flags.json = absl::GetFlag(FLAGS_json);
  flags.ps_server = absl::GetFlag(FLAGS_ps_server);
  flags.rpc_timeout_s = absl::GetFlag(FLAGS_rpc_timeout_s);
  flags.dense_piece_bytes = absl::GetFlag(FLAGS_dense_piece_bytes);
  flags.bdp_probe = absl::GetFlag(FLAGS_bdp_probe);
  flags.link_rate = absl::GetFlag(FLAGS_link_rate);
  flags.ps_replicas = absl::GetFlag(FLAGS_ps_replicas);
  flags.scaling = absl::GetFlag(FLAGS_scaling);
  flags.scaling_size = absl::GetFlag(FLAGS_scaling_size);
  flags.scaling_link_rate = absl::GetFlag(FLAGS_scaling_link_rate);
  flags.verbose = absl::GetFlag(FLAGS_verbose);
  flags.wire = absl::GetFlag(FLAGS_wire);
  flags.hash_capacity_fraction = absl::GetFlag(FLAGS_hash_capacity_fraction);
  flags.hash_eviction = absl::GetFlag(FLAGS_hash_eviction);
  flags.hash_batches = absl::GetFlag(FLAGS_hash_batches);
  flags.table_store_dir = absl::GetFlag(FLAGS_table_store_dir);
  return flags;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Data-plane benchmark: starts ps_server processes and measures Push, Pull, PushPull, "
      "PullRows and PushRows against TCP and memcpy references.\n"
      "Usage: ps_bench [--ps=1] [--workers=1] [--sizes=1M,16M,64M] [--json=PATH]");
  pst::flags::ParseCommandLineOrExit(argc, argv);
  // Its threads stand for workers, which tune the process the same way.
  pst::common::TuneForServing();
  try {
    if (const int fd = absl::GetFlag(FLAGS_worker_channel_fd); fd >= 0) {
      return pst::bench::RunWorkerProcess(fd);
    }
    absl::StatusOr<pst::bench::Options> options = pst::bench::ParseOptions(ReadFlags());
    if (!options.ok()) {
      std::fprintf(stderr, "ps_bench: %s\n", std::string(options.status().message()).c_str());
      return 2;
    }
    return pst::bench::RunPsBench(*options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_bench: fatal: %s\n", e.what());
    return 1;
  }
}
