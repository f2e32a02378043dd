// The parameter servers a benchmark runs against: real ps_server processes
// started by this process, on loopback or each behind a shaped link.
#ifndef PST_BENCH_PS_CLUSTER_H_
#define PST_BENCH_PS_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/child_process.h"
#include "bench/ps_bench_options.h"
#include "proto/pstrain.pb.h"

namespace pst::tools {
class ShapedLink;
}  // namespace pst::tools

namespace pst::bench {

// P ps_server processes on free 127.0.0.1 ports, started and stopped by
// this object. Not thread-safe except CpuSeconds() and MemoryBytes().
class PsCluster {
 public:
  // Starts `num_ps` ps processes of options.ps_server (in a cluster that
  // also names `num_workers` workers), each behind a link of
  // options.link_rate if set, and waits until every one answers Health.
  // Errors: Unavailable if a ps does not come up; that of the link if a
  // shaped link cannot be made.
  static absl::StatusOr<std::unique_ptr<PsCluster>> Start(const Options& options, int num_ps,
                                                          int num_workers);

  ~PsCluster();

  int size() const { return static_cast<int>(ps_.size()); }
  std::vector<std::string> addresses() const;

  // The last lines a ps wrote, for error messages.
  std::string Tail(int i);

  // OK while every ps runs; otherwise names the one that stopped.
  absl::Status CheckAlive();

  // Total CPU time of the ps processes so far.
  absl::StatusOr<double> CpuSeconds() const;
  // The sum over the ps of a /proc/<pid>/status field ("VmRSS", "VmHWM").
  int64_t MemoryBytes(const std::string& field) const;

  // The rows the tables' policies evicted so far, summed over the ps (their
  // Health's table_evictions). Errors: that of a Health call.
  absl::StatusOr<int64_t> TableEvictions() const;

  // Creates `plan`'s variables, each on its ps, with `optimizer`; with
  // `replicas` 2, each ps's shard backed up on the next ps.
  absl::Status CreateVariables(const proto::PlacementPlan& plan,
                               const proto::OptimizerConfig& optimizer, int num_workers,
                               int replicas = 1);

  // Shutdown RPC, then SIGTERM, then SIGKILL; waits for every process.
  void Stop();

 private:
  PsCluster() = default;
  // Removed by the destructor, after Stop() has ended the ps in them.
  std::vector<std::unique_ptr<tools::ShapedLink>> links_;
  std::vector<std::unique_ptr<ChildProcess>> ps_;
  std::vector<std::string> addresses_;
};

}  // namespace pst::bench

#endif  // PST_BENCH_PS_CLUSTER_H_
