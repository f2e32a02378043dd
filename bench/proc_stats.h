// Figures of processes, from /proc and getrusage: the CPU and memory
// columns of ps_bench, and the load average it prints.
#ifndef PST_BENCH_PROC_STATS_H_
#define PST_BENCH_PROC_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace pst::bench {

// utime + stime of a process, in seconds. Errors: NotFound if it is gone.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM"); 0 if unreadable.
int64_t ProcessMemoryBytes(pid_t pid, const std::string& field);

// The 1-minute load average: other work on the machine skews every figure.
double LoadAverage();

// utime + stime of this process, in seconds.
double SelfCpuSeconds();

}  // namespace pst::bench

#endif  // PST_BENCH_PROC_STATS_H_
