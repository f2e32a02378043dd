#include "bench/case_runner.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/proc_stats.h"
#include "bench/ps_bench_options.h"

namespace pst::bench {
namespace {

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

void RunCase(PsCluster& cluster, std::vector<Op>& ops, absl::Duration budget, int min_iters,
             Result* result) {
  const int num_workers = static_cast<int>(ops.size());
  if (!BeginRun(cluster, num_workers, result)) return;
  std::vector<std::vector<double>> latencies(num_workers);
  std::vector<double> bytes(num_workers, 0);
  std::vector<absl::Status> errors(num_workers);
  absl::BlockingCounter warmed(num_workers);
  absl::Notification go;
  absl::Time deadline;
  std::vector<std::thread> threads;
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back([&, w] {
      // One operation, with whatever a library throws turned into a status.
      auto run_op = [&]() -> absl::StatusOr<double> {
        try {
          return ops[w]();
        } catch (const std::exception& e) {
          return absl::InternalError(absl::StrCat("exception: ", e.what()));
        }
      };
      absl::Status status = run_op().status();  // warm-up: buffers, connections
      warmed.DecrementCount();
      go.WaitForNotification();
      for (int i = 0; status.ok() && (i < min_iters || absl::Now() < deadline); ++i) {
        const absl::Time t0 = absl::Now();
        absl::StatusOr<double> moved = run_op();
        if (!moved.ok()) {
          status = moved.status();
          break;
        }
        latencies[w].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        bytes[w] += *moved;
      }
      errors[w] = status;
    });
  }
  warmed.Wait();
  const absl::StatusOr<double> cpu0 = cluster.CpuSeconds();
  const double self0 = SelfCpuSeconds();
  const absl::Time start = absl::Now();
  deadline = start + budget;
  go.Notify();
  for (std::thread& t : threads) t.join();
  const absl::Time end = absl::Now();
  const absl::StatusOr<double> cpu1 = cluster.CpuSeconds();
  const double self1 = SelfCpuSeconds();

  for (int w = 0; w < num_workers; ++w) {
    if (!errors[w].ok()) {
      FailRun(cluster,
              absl::StrCat("worker ", w, ": ", absl::StatusCodeToString(errors[w].code()), ": ",
                           errors[w].message()),
              result);
      return;
    }
  }
  TimedRun run;
  run.latencies_ms = std::move(latencies);
  run.bytes = std::accumulate(bytes.begin(), bytes.end(), 0.0);
  run.seconds = absl::ToDoubleSeconds(end - start);
  run.ps_cpu_s = CpuBetween(cpu0, cpu1);
  run.client_cpu_s = self1 - self0;
  AddRun(cluster, std::move(run), result);
}

bool BeginRun(PsCluster& cluster, int num_workers, Result* result) {
  result->workers = num_workers;
  result->ps = cluster.size();
  if (!result->error.empty()) return false;
  if (absl::Status alive = cluster.CheckAlive(); !alive.ok()) {
    result->error = std::string(alive.message());
    return false;
  }
  return true;
}

void FailRun(PsCluster& cluster, std::string error, Result* result) {
  result->error = std::move(error);
  if (absl::Status alive = cluster.CheckAlive(); !alive.ok()) {
    absl::StrAppend(&result->error, " [", alive.message(), "]");
  }
}

absl::StatusOr<double> CpuBetween(const absl::StatusOr<double>& before,
                                  const absl::StatusOr<double>& after) {
  if (!before.ok()) return before.status();
  if (!after.ok()) return after.status();
  return *after - *before;
}

void AddRun(const PsCluster& cluster, TimedRun run, Result* result) {
  for (const auto& l : run.latencies_ms) {
    result->latencies_ms.insert(result->latencies_ms.end(), l.begin(), l.end());
  }
  result->seconds += run.seconds;
  result->bytes += run.bytes;
  if (run.ps_cpu_s.ok()) {
    result->ps_cpu_s += *run.ps_cpu_s;
  } else {
    result->ps_cpu_known = false;
  }
  result->client_cpu_s += run.client_cpu_s;
  result->ps_rss_bytes = cluster.MemoryBytes("VmRSS");
}

void FinishResult(Result* result) {
  std::vector<double>& all = result->latencies_ms;
  std::sort(all.begin(), all.end());
  result->ops = static_cast<int64_t>(all.size());
  if (!result->error.empty() || result->seconds <= 0) return;
  result->gbps = result->bytes / result->seconds / kGB;
  result->p50_ms = Percentile(all, 0.50);
  result->p99_ms = Percentile(all, 0.99);
  result->max_ms = all.empty() ? 0 : all.back();
  if (result->bytes > 0) {
    if (result->ps_cpu_known) result->ps_cpu_s_per_gb = result->ps_cpu_s / (result->bytes / kGB);
    result->client_cpu_s_per_gb = result->client_cpu_s / (result->bytes / kGB);
  }
}

}  // namespace pst::bench
