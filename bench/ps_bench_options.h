// ps_bench's settings: the values of its flags as typed (OptionFlags, read
// by ps_bench_main) and the parsed, checked Options the benchmark runs on.
#ifndef PST_BENCH_PS_BENCH_OPTIONS_H_
#define PST_BENCH_PS_BENCH_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpc/grpc_channel.h"

namespace pst::bench {

// The unit of every GB/s figure: the output says 1 GB = 1e9 bytes.
inline constexpr double kGB = 1e9;

// One field per flag of ps_bench, as the flag holds it; the defaults and
// help texts live with the flag definitions.
struct OptionFlags {
  std::string ps;
  std::string workers;
  std::string workers_as;
  std::string sizes;
  int rows = 0;
  int dim = 0;
  int64_t table_rows = 0;
  double zipf_s = 0;
  double seconds_per_case = 0;
  int min_iters = 0;
  int rounds = 0;
  double reference_seconds = 0;
  std::string cases;
  std::string json;
  std::string ps_server;
  double rpc_timeout_s = 0;
  int64_t dense_piece_bytes = 0;
  bool bdp_probe = true;
  std::string link_rate;
  int ps_replicas = 1;
  bool scaling = false;
  std::string scaling_size;
  std::string scaling_link_rate;
  bool verbose = false;
  std::string wire;
  double hash_capacity_fraction = 0;
  std::string hash_eviction;
  int hash_batches = 0;
  std::string table_store_dir;
};

// The settings of a run, as ParseOptions made and checked them.
struct Options {
  std::vector<int> ps_counts;
  std::vector<int> worker_counts;
  // How the dense cases' workers run, each in turn in the same rounds:
  // "threads" of this process, sharing it, or "processes" of their own
  // (worker_processes.h). The sparse and hash cases run threads.
  std::vector<std::string> workers_as = {"threads"};
  std::vector<int64_t> sizes;
  int rows = 0;
  int dim = 0;
  int64_t table_rows = 0;
  double zipf_s = 0;
  absl::Duration case_budget;
  int min_iters = 1;
  int rounds = 1;
  absl::Duration reference_budget;
  std::set<std::string> cases;
  std::string json;
  std::string ps_server;
  absl::Duration rpc_timeout;
  int64_t dense_piece_bytes = 0;
  // false: the ps and the dense connections use a fixed HTTP/2 window.
  bool bdp_probe = true;
  std::string link_rate;
  int ps_replicas = 1;
  bool scaling = false;
  int64_t scaling_size = 0;
  std::string scaling_link_rate;
  bool verbose = false;
  // Dense cases run in each: "float32", "bf16", "topk:RATIO".
  std::vector<std::string> wire = {"float32"};
  // hash_push_evict: each partition's capacity as a share of the distinct
  // ids the workers' batches touch (over the partitions), and its policy.
  double hash_capacity_fraction = 0.25;
  std::string hash_eviction = "lru";
  // The hash cases' id batches per worker, pushed in turn.
  int hash_batches = 32;
  // Non-empty: each ps keeps the bounded table's rows past its capacity
  // on disk, under table_store_dir/ps<i> (ps_server --table_store_dir).
  std::string table_store_dir;

  bool Has(const std::string& c) const { return cases.count(c) > 0; }
  bool AnyDense() const { return Has("push") || Has("pull") || Has("pushpull"); }
  bool AnySparse() const { return Has("sparse_pull") || Has("sparse_push"); }
  bool AnyHash() const { return Has("hash_push") || Has("hash_push_evict"); }
  bool WorkerThreads() const {
    return std::find(workers_as.begin(), workers_as.end(), "threads") != workers_as.end();
  }
  bool WorkerProcesses() const {
    return std::find(workers_as.begin(), workers_as.end(), "processes") != workers_as.end();
  }
  // The scaling comparison's workers: processes when --workers_as has them
  // (a real cluster's shape), else threads.
  std::string ScalingWorkersAs() const { return WorkerProcesses() ? "processes" : "threads"; }
  // The clients' gRPC settings: plaintext (the ps run without TLS) and the
  // BDP probe as bdp_probe says.
  rpc::RpcSettings Rpc() const {
    rpc::RpcSettings settings;
    settings.dense_bdp_probe = bdp_probe;
    return settings;
  }
};

// Parses the comma lists and sizes of `flags` and checks every setting; an
// empty ps_server becomes the ps_server next to this executable.
// Errors: InvalidArgument naming the first bad flag.
absl::StatusOr<Options> ParseOptions(const OptionFlags& flags);

// The ratio of a --wire setting "topk:RATIO"; 0 for any other.
double TopKRatio(absl::string_view wire);

// A float count as --sizes writes it: 1048576 -> "1M", 16384 -> "16K".
std::string SizeName(int64_t floats);

}  // namespace pst::bench

#endif  // PST_BENCH_PS_BENCH_OPTIONS_H_
