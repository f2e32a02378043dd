#include "bench/proc_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pst::bench {

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!in || !std::getline(in, stat)) {
    return absl::NotFoundError(absl::StrCat("cannot read /proc/", pid, "/stat"));
  }
  // Fields after "(comm)": state is field 3; utime and stime are 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::DataLossError("malformed /proc/pid/stat");
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> f;
  for (std::string s; fields >> s && f.size() < 13;) f.push_back(s);
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return absl::DataLossError("malformed /proc/pid/stat");
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t ProcessMemoryBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kb = 0;
    std::istringstream rest(line.substr(field.size() + 1));
    rest >> kb;
    return kb * 1024;
  }
  return 0;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace pst::bench
