// ps_bench's workers as processes of their own (--workers_as=processes),
// as a real cluster runs them: each a child ps_bench (worker_process.h)
// with its own gRPC transport and connections, started once per cluster
// shape and driven over a socket. The parent times each case as RunCase
// times threads: every worker warmed up, then all told to go together, the
// span from the go to the last answer; the workers' CPU is their own.
#ifndef PST_BENCH_WORKER_PROCESSES_H_
#define PST_BENCH_WORKER_PROCESSES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/case_runner.h"
#include "bench/child_process.h"
#include "bench/message_channel.h"
#include "bench/ps_bench_options.h"
#include "bench/ps_cluster.h"
#include "proto/pstrain.pb.h"

namespace pst::bench {

// A dense case as worker processes run it.
struct DenseCase {
  std::string op;  // push, pull, pushpull
  int64_t size_floats = 0;
  std::string wire;  // float32, bf16, topk:RATIO
};

// Not thread-safe.
class WorkerProcesses {
 public:
  // Starts `num_workers` processes of this executable, workers 0.. of
  // `plan` on `cluster`, each with an incarnation of its own. Errors:
  // those of starting one; Unavailable naming one that fails its setup.
  static absl::StatusOr<std::unique_ptr<WorkerProcesses>> Start(const Options& options,
                                                                const proto::PlacementPlan& plan,
                                                                const PsCluster& cluster,
                                                                int num_workers);
  // Tells each to quit and waits for it (SIGTERM, SIGKILL past 10 s).
  ~WorkerProcesses();

  // Runs `c` on every worker for `budget` (and `min_iters` operations each
  // at least) and adds what it measured to `*result` (AddRun); a failure
  // goes into result->error, naming the worker and, if it died, its end.
  void RunCase(PsCluster& cluster, const DenseCase& c, absl::Duration budget, int min_iters,
               Result* result);

 private:
  struct Worker {
    std::unique_ptr<ChildProcess> process;
    std::unique_ptr<MessageChannel> channel;
  };
  explicit WorkerProcesses(absl::Duration rpc_timeout) : rpc_timeout_(rpc_timeout) {}
  // Sends `message` to every worker, then takes each one's answer within
  // `timeout`, into `*answers`. Errors: the first worker's failure, named.
  absl::Status Exchange(const nlohmann::json& message, absl::Duration timeout,
                        std::vector<nlohmann::json>* answers);
  // "worker process w: <why>", with its end if it died.
  std::string Describe(int w, const absl::Status& status);

  const absl::Duration rpc_timeout_;
  std::vector<Worker> workers_;
};

}  // namespace pst::bench

#endif  // PST_BENCH_WORKER_PROCESSES_H_
