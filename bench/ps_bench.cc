// ps_bench: the data plane's benchmark. Starts P real ps_server processes
// (the binary next to this one) on free 127.0.0.1 ports, creates dense
// variables and an embedding table on them, and runs W client threads, each
// with its own PsClient over the gRPC transport that workers use:
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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grpc_ps_transport.h"
#include "client/ps_client.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/partition.h"
#include "common/placement.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "common/tf_config.h"
#include "flags/command_line.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.grpc.pb.h"
#include "tools/netns.h"
#include "tools/subprocess.h"

ABSL_FLAG(std::string, ps, "1",
          "Number of ps processes; a comma list (e.g. 1,2) runs every case for each.");
ABSL_FLAG(std::string, workers, "1",
          "Number of client threads; a comma list runs every case for each (crossed with --ps).");
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
          "Cases to run, a comma list of push, pull, pushpull, sparse_pull, sparse_push.");
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

namespace pst::bench {
namespace {

constexpr char kTable[] = "bench_table";
constexpr double kGB = 1e9;

// ---------------------------------------------------------------------------
// Flags.

struct Options {
  std::vector<int> ps_counts;
  std::vector<int> worker_counts;
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
  std::string link_rate;
  int ps_replicas = 1;
  bool scaling = false;
  int64_t scaling_size = 0;
  std::string scaling_link_rate;
  bool verbose = false;

  bool Has(const std::string& c) const { return cases.count(c) > 0; }
  bool AnyDense() const { return Has("push") || Has("pull") || Has("pushpull"); }
  bool AnySparse() const { return Has("sparse_pull") || Has("sparse_push"); }
};

absl::StatusOr<std::vector<int>> ParseCounts(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a count between 1 and 64"));
    }
    out.push_back(n);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

// "1M" -> 1048576, "4096" -> 4096, "16K" -> 16384.
absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::string digits(part);
    int64_t unit = 1;
    if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) unit = int64_t{1} << 10;
    if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) unit = int64_t{1} << 20;
    if (!digits.empty() && (digits.back() == 'G' || digits.back() == 'g')) unit = int64_t{1} << 30;
    if (unit != 1) digits.pop_back();
    int64_t n = 0;
    if (!absl::SimpleAtoi(digits, &n) || n < 1 || n > (int64_t{1} << 32) / unit) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a float count such as 4096, 1M or 64M"));
    }
    out.push_back(n * unit);
  }
  return out;
}

absl::StatusOr<Options> ParseOptions() {
  Options o;
  PST_ASSIGN_OR_RETURN(o.ps_counts, ParseCounts("ps", absl::GetFlag(FLAGS_ps)));
  PST_ASSIGN_OR_RETURN(o.worker_counts, ParseCounts("workers", absl::GetFlag(FLAGS_workers)));
  o.link_rate = absl::GetFlag(FLAGS_link_rate);
  o.ps_replicas = absl::GetFlag(FLAGS_ps_replicas);
  if (o.ps_replicas != 1 && o.ps_replicas != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_replicas must be 1 or 2, not ", o.ps_replicas));
  }
  o.scaling_link_rate = absl::GetFlag(FLAGS_scaling_link_rate);
  auto check_rate = [](const char* flag, const std::string& rate) {
    if (rate.find_first_not_of("0123456789.kmgKMGbitps") == std::string::npos) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", rate, " is not a tc rate such as 2gbit or 500mbit"));
  };
  PST_RETURN_IF_ERROR(check_rate("link_rate", o.link_rate));
  PST_RETURN_IF_ERROR(check_rate("scaling_link_rate", o.scaling_link_rate));
  o.scaling = absl::GetFlag(FLAGS_scaling);
  if (o.scaling) {
    PST_ASSIGN_OR_RETURN(const std::vector<int64_t> scaling_size,
                         ParseSizes("scaling_size", absl::GetFlag(FLAGS_scaling_size)));
    if (scaling_size.size() != 1 || scaling_size[0] < 2) {
      return absl::InvalidArgumentError("--scaling_size must be one size of at least 2 floats");
    }
    o.scaling_size = scaling_size[0];
    if (o.scaling_link_rate.empty()) {
      return absl::InvalidArgumentError("--scaling_link_rate is empty");
    }
  }
  o.dense_piece_bytes = absl::GetFlag(FLAGS_dense_piece_bytes);
  if (o.dense_piece_bytes < 0) {
    return absl::InvalidArgumentError("--dense_piece_bytes must be >= 0 (0: never cut)");
  }
  PST_ASSIGN_OR_RETURN(o.sizes, ParseSizes("sizes", absl::GetFlag(FLAGS_sizes)));
  o.rows = absl::GetFlag(FLAGS_rows);
  o.dim = absl::GetFlag(FLAGS_dim);
  o.table_rows = absl::GetFlag(FLAGS_table_rows);
  o.zipf_s = absl::GetFlag(FLAGS_zipf_s);
  o.case_budget = absl::Seconds(absl::GetFlag(FLAGS_seconds_per_case));
  o.min_iters = absl::GetFlag(FLAGS_min_iters);
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.reference_budget = absl::Seconds(absl::GetFlag(FLAGS_reference_seconds));
  o.json = absl::GetFlag(FLAGS_json);
  o.ps_server = absl::GetFlag(FLAGS_ps_server);
  if (o.ps_server.empty()) o.ps_server = tools::ExecutableDir() + "/ps_server";
  o.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout_s));
  o.verbose = absl::GetFlag(FLAGS_verbose);
  const std::set<std::string> known = {"push", "pull", "pushpull", "sparse_pull", "sparse_push"};
  for (absl::string_view c :
       absl::StrSplit(absl::GetFlag(FLAGS_cases), ',', absl::SkipWhitespace())) {
    if (known.count(std::string(c)) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cases: unknown case '", c,
                       "' (known: push, pull, pushpull, sparse_pull, sparse_push)"));
    }
    o.cases.insert(std::string(c));
  }
  if (o.cases.empty()) return absl::InvalidArgumentError("--cases is empty");
  if (o.AnyDense() && o.sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  const int max_ps = *std::max_element(o.ps_counts.begin(), o.ps_counts.end());
  for (int64_t s : o.sizes) {
    if (s < max_ps) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: ", s, " floats cannot be split over ", max_ps, " ps"));
    }
  }
  if (o.AnySparse()) {
    if (o.rows < 1 || o.dim < 1 || o.table_rows < max_ps) {
      return absl::InvalidArgumentError(
          "--rows and --dim must be >= 1 and --table_rows at least the number of ps");
    }
    if (!(o.zipf_s > 0)) return absl::InvalidArgumentError("--zipf_s must be > 0");
  }
  if (o.case_budget < absl::ZeroDuration() || o.min_iters < 1 || o.rounds < 1 ||
      o.reference_budget <= absl::ZeroDuration() || o.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--seconds_per_case must be >= 0, --min_iters and --rounds >= 1, --reference_seconds "
        "and --rpc_timeout_s > 0");
  }
  return o;
}

std::string SizeName(int64_t floats) {
  if (floats % (int64_t{1} << 20) == 0) return absl::StrCat(floats >> 20, "M");
  if (floats % (int64_t{1} << 10) == 0) return absl::StrCat(floats >> 10, "K");
  return absl::StrCat(floats);
}

// ---------------------------------------------------------------------------
// Measuring processes.

// utime + stime of a process, in seconds. Errors: NotFound if it is gone.
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

// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM"); 0 if unreadable.
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

// The 1-minute load average: other work on the machine skews every figure.
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

// Waits up to `timeout` for child `pid` to exit; its wait status, or nullopt.
std::optional<int> WaitChild(pid_t pid, absl::Duration timeout) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd pfd{fd, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    close(fd);
  }
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == pid) return status;
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// The ps processes.

// A network namespace holding one ps, joined to this one by a veth pair
// shaped to a rate each way: the ps sees a NIC of that rate, as on a
// machine of its own. Removed (with its veth pair) on destruction.
class ShapedLink {
 public:
  // A link of its own: names and subnet never used before by this process.
  // Errors: Internal naming the command that failed and what it printed.
  // `routed`: the namespace's default route leads back through this one,
  // which forwards between links (an iptables FORWARD rule per link, taken
  // out on destruction), so ps behind two links reach each other.
  static absl::StatusOr<std::unique_ptr<ShapedLink>> Create(const std::string& rate,
                                                            bool routed = false) {
    std::unique_ptr<ShapedLink> link(new ShapedLink());
    PST_ASSIGN_OR_RETURN(link->ns_, tools::VethNamespace::Create("pb"));
    const tools::VethNamespace& ns = *link->ns_;
    // 10.200-249.x.0/24: the pid spreads processes, the sequence number
    // makes each link of this one a subnet of its own (256 before one
    // comes again, long after the first link is gone).
    const int pid = static_cast<int>(getpid());
    const std::string net =
        absl::StrCat("10.", 200 + pid % 50, ".", (pid / 50 + ns.sequence()) % 256);
    link->address_ = net + ".2";
    const std::string shape = absl::StrCat(" root tbf rate ", rate, " burst 4mb latency 100ms");
    const std::string ip = tools::IpPath();
    for (const std::string& command :
         {absl::StrCat(ip, " addr add ", net, ".1/24 dev ", ns.host_veth()),
          absl::StrCat("tc qdisc add dev ", ns.host_veth(), shape)}) {
      PST_RETURN_IF_ERROR(tools::RunShell(command).status());
    }
    for (const std::string& command :
         {absl::StrCat(ip, " addr add ", net, ".2/24 dev ", ns.inner_veth()),
          absl::StrCat("tc qdisc add dev ", ns.inner_veth(), shape)}) {
      PST_RETURN_IF_ERROR(ns.Run(command).status());
    }
    if (routed) {
      PST_RETURN_IF_ERROR(ns.Run(absl::StrCat(ip, " route add default via ", net, ".1")).status());
      const std::string rule = absl::StrCat("FORWARD -i ", ns.host_veth(), " -j ACCEPT");
      PST_RETURN_IF_ERROR(tools::RunShell(absl::StrCat("iptables -I ", rule)).status());
      link->forward_rule_ = rule;
      PST_RETURN_IF_ERROR(tools::RunShell("grep -q 1 /proc/sys/net/ipv4/ip_forward || "
                                          "echo 1 > /proc/sys/net/ipv4/ip_forward")
                              .status());
    }
    return link;
  }
  ~ShapedLink() {
    if (!forward_rule_.empty()) {
      tools::RunShell(absl::StrCat("iptables -D ", forward_rule_)).status().IgnoreError();
    }
  }
  // The ps's address inside the namespace.
  const std::string& address() const { return address_; }
  // argv that runs `argv` inside the namespace.
  std::vector<std::string> Wrap(std::vector<std::string> argv) const {
    return ns_->Wrap(std::move(argv));
  }

 private:
  ShapedLink() = default;
  std::unique_ptr<tools::VethNamespace> ns_;
  std::string address_;
  std::string forward_rule_;  // inserted by Create (routed), deleted on destruction
};

// P ps_server processes on free 127.0.0.1 ports, started and stopped by
// this object. Not thread-safe except CpuSeconds() and RssBytes().
class PsCluster {
 public:
  struct Process {
    pid_t pid = -1;
    std::string address;
    std::thread reader;
    bool exited = false;
    int wait_status = 0;
    absl::Mutex mu;
    std::deque<std::string> tail ABSL_GUARDED_BY(mu);  // last lines of output
  };

  static absl::StatusOr<std::unique_ptr<PsCluster>> Start(const Options& options, int num_ps,
                                                          int num_workers) {
    std::unique_ptr<PsCluster> cluster(new PsCluster());
    common::TfConfig tf;
    PST_ASSIGN_OR_RETURN(const std::vector<int> ports,
                         tools::PickFreePorts(1 + num_ps + num_workers));
    size_t next = 0;
    auto pick = [&](std::vector<std::string>* list, int n) {
      for (int i = 0; i < n; ++i) list->push_back(absl::StrCat("127.0.0.1:", ports[next++]));
    };
    pick(&tf.cluster.chief, 1);
    pick(&tf.cluster.ps, num_ps);
    pick(&tf.cluster.worker, num_workers);
    if (!options.link_rate.empty()) {
      for (int i = 0; i < num_ps; ++i) {
        absl::StatusOr<std::unique_ptr<ShapedLink>> made =
            ShapedLink::Create(options.link_rate, /*routed=*/options.ps_replicas == 2);
        if (!made.ok()) {
          return absl::Status(made.status().code(),
                              absl::StrCat("--link_rate: ", made.status().message()));
        }
        std::unique_ptr<ShapedLink> link = *std::move(made);
        tf.cluster.ps[i] = absl::StrCat(link->address(), ":", ports[1 + i]);
        cluster->links_.push_back(std::move(link));
      }
    }
    tf.task.type = common::TaskType::kPs;
    for (int i = 0; i < num_ps; ++i) {
      tf.task.index = i;
      tools::SpawnOptions spawn;
      // No chief watches this ps: the benchmark plays its part.
      spawn.argv = {options.ps_server, "--chief_timeout_s=0",
                    absl::StrCat("--bdp_probe=", absl::GetFlag(FLAGS_bdp_probe))};
      if (!cluster->links_.empty()) spawn.argv = cluster->links_[i]->Wrap(spawn.argv);
      spawn.env = {"TF_CONFIG=" + common::TfConfigToJson(tf)};
      int fd = -1;
      absl::StatusOr<pid_t> pid = tools::Spawn(spawn, &fd);
      if (!pid.ok()) return pid.status();
      auto process = std::make_unique<Process>();
      process->pid = *pid;
      process->address = tf.cluster.ps[i];
      Process* p = process.get();
      const bool verbose = options.verbose;
      p->reader = std::thread([p, fd, i, verbose] {
        tools::ForEachLine(fd, [p, i, verbose](const std::string& line) {
          if (verbose) std::fprintf(stderr, "[ps:%d] %s\n", i, line.c_str());
          absl::MutexLock lock(&p->mu);
          p->tail.push_back(line);
          if (p->tail.size() > 20) p->tail.pop_front();
        });
      });
      cluster->ps_.push_back(std::move(process));
    }
    // Every ps answers Health once it serves.
    for (int i = 0; i < num_ps; ++i) {
      auto stub = proto::ParameterServer::NewStub(common::MakeChannel(cluster->ps_[i]->address));
      grpc::ClientContext context;
      common::SetDeadline(&context, absl::Seconds(30), /*wait_for_ready=*/true);
      proto::HealthRequest request;
      proto::HealthResponse response;
      grpc::Status status = stub->Health(&context, request, &response);
      if (!status.ok()) {
        return absl::UnavailableError(
            absl::StrCat("ps ", i, " (", options.ps_server, " at ", cluster->ps_[i]->address,
                         ") did not come up: ", status.error_message(), cluster->Tail(i)));
      }
    }
    return cluster;
  }

  ~PsCluster() { Stop(); }

  int size() const { return static_cast<int>(ps_.size()); }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (const auto& p : ps_) out.push_back(p->address);
    return out;
  }

  // The last lines a ps wrote, for error messages.
  std::string Tail(int i) {
    absl::MutexLock lock(&ps_[i]->mu);
    if (ps_[i]->tail.empty()) return "";
    return absl::StrCat("; its last output:\n  ", absl::StrJoin(ps_[i]->tail, "\n  "));
  }

  // OK while every ps runs; otherwise names the one that stopped.
  absl::Status CheckAlive() {
    for (int i = 0; i < size(); ++i) {
      Process& p = *ps_[i];
      if (!p.exited) {
        std::optional<int> status = WaitChild(p.pid, absl::ZeroDuration());
        if (status.has_value()) {
          p.exited = true;
          p.wait_status = *status;
        }
      }
      if (p.exited) {
        return absl::UnavailableError(absl::StrCat(
            "ps ", i, " (pid ", p.pid, ") ", tools::DescribeWaitStatus(p.wait_status), Tail(i)));
      }
    }
    return absl::OkStatus();
  }

  // Total CPU time of the ps processes so far.
  absl::StatusOr<double> CpuSeconds() const {
    double total = 0;
    for (const auto& p : ps_) {
      PST_ASSIGN_OR_RETURN(const double s, ProcessCpuSeconds(p->pid));
      total += s;
    }
    return total;
  }
  int64_t MemoryBytes(const std::string& field) const {
    int64_t total = 0;
    for (const auto& p : ps_) total += ProcessMemoryBytes(p->pid, field);
    return total;
  }

  // Creates `plan`'s variables, each on its ps, with `optimizer`; with
  // `replicas` 2, each ps's shard backed up on the next ps.
  absl::Status CreateVariables(const proto::PlacementPlan& plan,
                               const proto::OptimizerConfig& optimizer, int num_workers,
                               int replicas = 1) {
    for (int i = 0; i < size(); ++i) {
      proto::CreateVariablesRequest request;
      *request.mutable_optimizer() = optimizer;
      request.mutable_sync()->set_mode(proto::ASYNC);
      request.mutable_sync()->set_num_workers(num_workers);
      for (const auto& entry : plan.variables()) {
        if (entry.ps_index() == i) *request.add_variables() = entry.spec();
      }
      if (replicas == 2) {
        request.mutable_copies()->set_primary(i);
        request.mutable_copies()->set_backup((i + 1) % size());
      }
      auto stub = proto::ParameterServer::NewStub(common::MakeChannel(ps_[i]->address));
      grpc::ClientContext context;
      common::SetDeadline(&context, absl::Seconds(120));
      proto::CreateVariablesResponse response;
      grpc::Status status = stub->CreateVariables(&context, request, &response);
      if (!status.ok()) {
        absl::Status s = common::FromGrpcStatus(status);
        return absl::Status(
            s.code(), absl::StrCat("creating the variables on ps ", i, ": ", s.message(), Tail(i)));
      }
    }
    return absl::OkStatus();
  }

  // Shutdown RPC, then SIGTERM, then SIGKILL; waits for every process.
  void Stop() {
    for (auto& p : ps_) {
      if (p->exited) continue;
      auto stub = proto::ParameterServer::NewStub(common::MakeChannel(p->address));
      grpc::ClientContext context;
      common::SetDeadline(&context, absl::Seconds(5));
      proto::ShutdownRequest request;
      request.set_reason("ps_bench is done");
      proto::ShutdownResponse response;
      (void)stub->Shutdown(&context, request, &response);
    }
    for (size_t i = 0; i < ps_.size(); ++i) {
      Process& p = *ps_[i];
      if (!p.exited) {
        std::optional<int> status = WaitChild(p.pid, absl::Seconds(10));
        if (!status.has_value()) {
          std::fprintf(stderr, "ps_bench: ps %zu did not exit after Shutdown; SIGTERM\n", i);
          kill(p.pid, SIGTERM);
          status = WaitChild(p.pid, absl::Seconds(5));
        }
        if (!status.has_value()) {
          std::fprintf(stderr, "ps_bench: ps %zu ignored SIGTERM; SIGKILL\n", i);
          kill(p.pid, SIGKILL);
          int s = 0;
          while (waitpid(p.pid, &s, 0) < 0 && errno == EINTR) {
          }
          status = s;
        }
        p.exited = true;
        p.wait_status = *status;
      }
      if (p.reader.joinable()) p.reader.join();
    }
    ps_.clear();
  }

 private:
  PsCluster() = default;
  // Removed by the destructor, after Stop() has ended the ps in them.
  std::vector<std::unique_ptr<ShapedLink>> links_;
  std::vector<std::unique_ptr<Process>> ps_;
};

// ---------------------------------------------------------------------------
// References: the wire (TCP over loopback) and memory.

// Two ends of one loopback TCP connection.
struct SocketPair {
  int send_fd = -1;
  int recv_fd = -1;
};

absl::StatusOr<std::vector<SocketPair>> ConnectLoopback(int count) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, count) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(listener);
    return absl::InternalError(absl::StrCat("listening on 127.0.0.1: ", std::strerror(err)));
  }
  std::vector<SocketPair> pairs;
  for (int i = 0; i < count; ++i) {
    SocketPair pair;
    pair.send_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (pair.send_fd < 0 ||
        connect(pair.send_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        (pair.recv_fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)) < 0) {
      const int err = errno;
      if (pair.send_fd >= 0) close(pair.send_fd);
      for (const SocketPair& p : pairs) {
        close(p.send_fd);
        close(p.recv_fd);
      }
      close(listener);
      return absl::InternalError(absl::StrCat("loopback connection: ", std::strerror(err)));
    }
    pairs.push_back(pair);
  }
  close(listener);
  return pairs;
}

// GB/s of `streams` TCP connections over loopback, each sending its share of
// `message_bytes`-byte messages from one buffer into another, for `budget`
// (at least two messages).
absl::StatusOr<double> TcpStreamGbps(int64_t message_bytes, int streams, absl::Duration budget) {
  PST_ASSIGN_OR_RETURN(std::vector<SocketPair> pairs, ConnectLoopback(streams));
  std::vector<char> src(message_bytes, 1), dst(message_bytes, 0);
  const int64_t share = message_bytes / streams;
  std::vector<int64_t> received(streams, 0);
  std::vector<std::string> errors(streams);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int s = 0; s < streams; ++s) {
    char* out = src.data() + s * share;
    char* in = dst.data() + s * share;
    threads.emplace_back([&, s, out] {
      for (int messages = 0; messages < 2 || !stop.load(std::memory_order_relaxed); ++messages) {
        for (int64_t off = 0; off < share;) {
          const ssize_t n = send(pairs[s].send_fd, out + off, share - off, MSG_NOSIGNAL);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            errors[s] = absl::StrCat("send: ", std::strerror(errno));
            shutdown(pairs[s].send_fd, SHUT_WR);
            return;
          }
          off += n;
        }
      }
      shutdown(pairs[s].send_fd, SHUT_WR);
    });
    threads.emplace_back([&, s, in] {
      int64_t off = 0;
      for (;;) {
        const ssize_t n = recv(pairs[s].recv_fd, in + off, share - off, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          errors[s] = absl::StrCat("recv: ", std::strerror(errno));
          shutdown(pairs[s].recv_fd, SHUT_RDWR);  // the sender sees it and stops
        }
        if (n <= 0) break;
        received[s] += n;
        off = (off + n) % share;
      }
    });
  }
  while (absl::Now() - start < budget) absl::SleepFor(absl::Milliseconds(10));
  stop.store(true);
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (const SocketPair& p : pairs) {
    close(p.send_fd);
    close(p.recv_fd);
  }
  for (const std::string& e : errors) {
    if (!e.empty()) return absl::InternalError(absl::StrCat("TCP reference: ", e));
  }
  return std::accumulate(received.begin(), received.end(), int64_t{0}) / seconds / kGB;
}

// GB/s of memcpy between two `bytes`-byte buffers (bytes copied; each byte
// is read once and written once).
double MemcpyGbps(int64_t bytes, absl::Duration budget) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // warm-up: fault the pages in
  int64_t copied = 0;
  const absl::Time start = absl::Now();
  do {
    std::memcpy(dst.data(), src.data(), bytes);
    src[copied % bytes] = dst[(copied + 7) % bytes];  // keep the copies observable
    copied += bytes;
  } while (absl::Now() - start < budget || copied < 3 * bytes);
  return copied / absl::ToDoubleSeconds(absl::Now() - start) / kGB;
}

struct References {
  double tcp_gbps = 0;     // one stream: the best over message sizes
  double tcp4_gbps = 0;    // four streams: the best over message sizes
  double memcpy_gbps = 0;  // at the largest message size
  int64_t memcpy_bytes = 0;
  std::map<int64_t, double> tcp_by_bytes;   // message bytes -> GB/s, one stream
  std::map<int64_t, double> tcp4_by_bytes;  // four streams
};

// The median of kReferenceRuns TcpStreamGbps runs sharing `budget`: one
// long run swings 20-25% from one bench to the next on a busy 2-core
// machine (a daemon waking, the scheduler's choices), which moved ratios
// near a target across it; a median of short runs moves much less.
constexpr int kReferenceRuns = 5;
absl::StatusOr<double> MedianTcpGbps(int64_t message_bytes, int streams, absl::Duration budget) {
  std::vector<double> runs;
  for (int r = 0; r < kReferenceRuns; ++r) {
    PST_ASSIGN_OR_RETURN(const double gbps,
                         TcpStreamGbps(message_bytes, streams, budget / kReferenceRuns));
    runs.push_back(gbps);
  }
  std::nth_element(runs.begin(), runs.begin() + kReferenceRuns / 2, runs.end());
  return runs[kReferenceRuns / 2];
}

absl::StatusOr<References> MeasureReferences(const std::vector<int64_t>& message_bytes,
                                             absl::Duration budget) {
  References refs;
  for (int64_t bytes : message_bytes) {
    PST_ASSIGN_OR_RETURN(const double one, MedianTcpGbps(bytes, 1, budget));
    PST_ASSIGN_OR_RETURN(const double four, MedianTcpGbps(bytes, 4, budget));
    refs.tcp_by_bytes[bytes] = one;
    refs.tcp4_by_bytes[bytes] = four;
    refs.tcp_gbps = std::max(refs.tcp_gbps, one);
    refs.tcp4_gbps = std::max(refs.tcp4_gbps, four);
    std::printf("  tcp reference (median of %d), %s messages: 1 stream %.2f GB/s, 4 streams "
                "%.2f GB/s\n",
                kReferenceRuns,
                absl::StrFormat("%.1f MB", bytes / 1e6).c_str(), one, four);
    std::fflush(stdout);
  }
  refs.memcpy_bytes = *std::max_element(message_bytes.begin(), message_bytes.end());
  refs.memcpy_gbps = MemcpyGbps(refs.memcpy_bytes, budget);
  std::printf("  memcpy reference, %.1f MB buffers: %.2f GB/s\n", refs.memcpy_bytes / 1e6,
              refs.memcpy_gbps);
  std::fflush(stdout);
  return refs;
}

// ---------------------------------------------------------------------------
// The model on the ps.

std::string DenseName(int64_t size) { return absl::StrCat("bench_dense_", size); }

// The dense variables as the chief places a model's: each cut into pieces
// of at most --dense_piece_bytes (common::SplitDense) and placed
// size-balanced. With --dense_piece_bytes=0, each is split into one part
// per ps instead, so that every ps still serves its share.
absl::StatusOr<std::vector<proto::PlacementPlan::Entry>> DenseEntries(const Options& options,
                                                                      int num_ps) {
  std::vector<proto::VariableSpec> specs;
  for (int64_t size : options.sizes) {
    proto::VariableSpec spec;
    spec.set_name(DenseName(size));
    spec.set_dtype(proto::DT_FLOAT32);
    spec.add_shape(size);
    spec.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    std::vector<proto::VariableSpec> pieces;
    if (options.dense_piece_bytes > 0) {
      PST_ASSIGN_OR_RETURN(pieces, common::SplitDense(spec, options.dense_piece_bytes));
    } else if (num_ps > 1) {
      PST_ASSIGN_OR_RETURN(pieces, common::SplitVariable(spec, num_ps, proto::DIV));
    } else {
      pieces.push_back(spec);
    }
    specs.insert(specs.end(), pieces.begin(), pieces.end());
  }
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan placed, common::PlaceSizeBalanced(specs, num_ps));
  return std::vector<proto::PlacementPlan::Entry>(placed.variables().begin(),
                                                  placed.variables().end());
}

absl::StatusOr<proto::PlacementPlan> BuildPlan(const Options& options, int num_ps) {
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  plan.set_policy("ps_bench");
  if (options.AnyDense()) {
    PST_ASSIGN_OR_RETURN(std::vector<proto::PlacementPlan::Entry> entries,
                         DenseEntries(options, num_ps));
    for (proto::PlacementPlan::Entry& entry : entries) *plan.add_variables() = std::move(entry);
  }
  if (options.AnySparse()) {
    proto::VariableSpec table;
    table.set_name(kTable);
    table.set_dtype(proto::DT_FLOAT32);
    table.add_shape(options.table_rows);
    table.add_shape(options.dim);
    table.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    // As the chief's default partitioner (min_max, 256 KiB slices, at most
    // 4 per ps), with 'mod' routing; partition p on ps p % P.
    PST_ASSIGN_OR_RETURN(
        const int parts,
        common::MinMaxPartitions(options.table_rows, options.dim * 4, 256 << 10, 4 * num_ps));
    PST_ASSIGN_OR_RETURN(std::vector<proto::VariableSpec> split,
                         common::SplitVariable(table, parts, proto::MOD));
    for (size_t p = 0; p < split.size(); ++p) {
      proto::PlacementPlan::Entry* entry = plan.add_variables();
      *entry->mutable_spec() = split[p];
      entry->set_ps_index(static_cast<int>(p) % num_ps);
    }
  }
  return plan;
}

int64_t PlanBytes(const proto::PlacementPlan& plan) {
  int64_t bytes = 0;
  for (const auto& entry : plan.variables()) {
    int64_t n = 4;
    for (int64_t d : entry.spec().shape()) n *= d;
    bytes += n;
  }
  return bytes;
}

// Zipf(s) ids over [0, n): rank k drawn with probability ~ 1/(k+1)^s, then
// scattered over the id space by a fixed bijection so that hot ids are not
// neighbours.
class ZipfIds {
 public:
  ZipfIds(int64_t n, double s) : n_(n), cdf_(n) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = sum;
    }
    for (double& c : cdf_) c /= sum;
    multiplier_ = 0x9E3779B1LL % n;
    while (multiplier_ < 1 || std::gcd(multiplier_, n) != 1) ++multiplier_;
  }
  int64_t Draw(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    int64_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    rank = std::min(rank, n_ - 1);
    return static_cast<int64_t>((static_cast<__int128>(rank) * multiplier_ + 12345) % n_);
  }

 private:
  int64_t n_;
  std::vector<double> cdf_;
  int64_t multiplier_ = 1;
};

// ---------------------------------------------------------------------------
// Cases.

struct Result {
  std::string op;
  int64_t size_floats = 0;  // dense
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
  double client_cpu_s_per_gb = 0;
  int64_t ps_rss_bytes = 0;
  std::string error;
  // Summed over a case's rounds, until FinishResult.
  std::vector<double> latencies_ms;
  double ps_cpu_s = 0;
  bool ps_cpu_known = true;
  double client_cpu_s = 0;
};

// One worker thread's state, kept across cases: its transport (channels),
// its push counter (the ps ignore repeats of (worker, incarnation, step)).
struct Worker {
  int index = 0;
  uint64_t incarnation = 0;
  int64_t step = 0;
  std::shared_ptr<common::PsTransport> transport;
};

// The bytes one operation moved, or its error.
using Op = std::function<absl::StatusOr<double>()>;

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Runs `ops[w]` on W threads: one warm-up each, then together until
// `budget` is spent and each has done `min_iters`. Adds the operations,
// bytes, time and CPU to `*result` (a case run in rounds adds each);
// FinishResult then computes the figures.
void RunCase(PsCluster& cluster, std::vector<Op>& ops, absl::Duration budget, int min_iters,
             Result* result) {
  const int num_workers = static_cast<int>(ops.size());
  result->workers = num_workers;
  result->ps = cluster.size();
  if (!result->error.empty()) return;
  if (absl::Status alive = cluster.CheckAlive(); !alive.ok()) {
    result->error = std::string(alive.message());
    return;
  }
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
      result->error = absl::StrCat("worker ", w, ": ", absl::StatusCodeToString(errors[w].code()),
                                   ": ", errors[w].message());
      if (absl::Status alive = cluster.CheckAlive(); !alive.ok()) {
        absl::StrAppend(&result->error, " [", alive.message(), "]");
      }
      return;
    }
  }
  for (const auto& l : latencies) {
    result->latencies_ms.insert(result->latencies_ms.end(), l.begin(), l.end());
  }
  result->seconds += absl::ToDoubleSeconds(end - start);
  result->bytes += std::accumulate(bytes.begin(), bytes.end(), 0.0);
  if (cpu0.ok() && cpu1.ok()) {
    result->ps_cpu_s += *cpu1 - *cpu0;
  } else {
    result->ps_cpu_known = false;
  }
  result->client_cpu_s += self1 - self0;
  result->ps_rss_bytes = cluster.MemoryBytes("VmRSS");
}

// The figures of a case from what its rounds added up.
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

// Every dense size and op, in --rounds rounds: each round runs each case
// for its share of the budget, so load that comes and goes during the run
// falls on every size alike rather than on whichever ran then.
std::vector<Result> RunDense(const Options& options, PsCluster& cluster,
                             const proto::PlacementPlan& plan, std::vector<Worker>& workers) {
  const int num_workers = static_cast<int>(workers.size());
  // What one size's operations use, for every round (addresses stay put).
  struct SizeState {
    worker::Values grads;  // shared by every worker (read only)
    std::vector<std::unique_ptr<worker::PsClient>> clients;
    std::vector<worker::Values> values;
  };
  struct Case {
    Result result;
    std::vector<Op> ops;
  };
  std::vector<std::unique_ptr<SizeState>> sizes;
  std::vector<Case> cases;
  for (int64_t size : options.sizes) {
    auto state = std::make_unique<SizeState>();
    // Small enough that SGD at the benchmark's learning rate keeps the
    // values finite.
    state->grads = {std::vector<float>(size, 1e-3f)};
    state->values.resize(num_workers);
    const double payload = static_cast<double>(size) * sizeof(float);
    std::string error;
    for (int w = 0; w < num_workers && error.empty(); ++w) {
      absl::StatusOr<std::unique_ptr<worker::PsClient>> client =
          worker::PsClient::Create(plan, {DenseName(size)}, workers[w].transport,
                                   workers[w].index, workers[w].incarnation);
      if (!client.ok()) {
        error = std::string(client.status().message());
      } else {
        state->clients.push_back(*std::move(client));
      }
    }
    for (const std::string op : {"push", "pull", "pushpull"}) {
      if (!options.Has(op)) continue;
      Case c;
      c.result.op = op;
      c.result.size_floats = size;
      c.result.error = error;
      for (int w = 0; w < num_workers && error.empty(); ++w) {
        Worker* me = &workers[w];
        worker::PsClient* client = state->clients[w].get();
        worker::Values* out = &state->values[w];
        const worker::Values* grads = &state->grads;
        if (op == "pull") {
          c.ops.push_back([client, out, payload]() -> absl::StatusOr<double> {
            PST_RETURN_IF_ERROR(client->Pull(out).status());
            return payload;
          });
        } else if (op == "pushpull") {
          c.ops.push_back([client, out, me, grads, payload]() -> absl::StatusOr<double> {
            ++me->step;
            PST_RETURN_IF_ERROR(client->PushPull(me->step, 0, *grads, out).status());
            return 2 * payload;
          });
        } else {
          c.ops.push_back([client, me, grads, payload]() -> absl::StatusOr<double> {
            ++me->step;
            PST_RETURN_IF_ERROR(client->Push(me->step, 0, *grads).status());
            return payload;
          });
        }
      }
      cases.push_back(std::move(c));
    }
    sizes.push_back(std::move(state));
  }

  const absl::Duration budget = options.case_budget / options.rounds;
  const int min_iters = (options.min_iters + options.rounds - 1) / options.rounds;
  for (int round = 1; round <= options.rounds; ++round) {
    for (Case& c : cases) {
      if (!c.result.error.empty()) continue;
      std::printf("  round %d of %d: %s of %s floats ...\n", round, options.rounds,
                  c.result.op.c_str(), SizeName(c.result.size_floats).c_str());
      std::fflush(stdout);
      RunCase(cluster, c.ops, budget, min_iters, &c.result);
    }
  }
  std::vector<Result> results;
  for (Case& c : cases) {
    FinishResult(&c.result);
    results.push_back(std::move(c.result));
  }
  return results;
}

std::vector<Result> RunSparse(const Options& options, PsCluster& cluster,
                              const proto::PlacementPlan& plan, std::vector<Worker>& workers) {
  std::vector<Result> results;
  const int num_workers = static_cast<int>(workers.size());
  const int dim = options.dim;
  // Id batches drawn up front, so drawing is not timed.
  constexpr int kBatches = 32;
  const ZipfIds zipf(options.table_rows, options.zipf_s);
  struct Batch {
    std::vector<int64_t> ids;
    int64_t unique = 0;
  };
  std::vector<std::vector<Batch>> batches(num_workers);
  for (int w = 0; w < num_workers; ++w) {
    std::mt19937_64 rng(1000 + w);
    for (int b = 0; b < kBatches; ++b) {
      Batch batch;
      for (int i = 0; i < options.rows; ++i) batch.ids.push_back(zipf.Draw(rng));
      batch.unique =
          static_cast<int64_t>(std::set<int64_t>(batch.ids.begin(), batch.ids.end()).size());
      batches[w].push_back(std::move(batch));
    }
  }
  const worker::Values grads = {std::vector<float>(static_cast<size_t>(options.rows) * dim, 1e-3f)};

  std::vector<std::unique_ptr<worker::PsClient>> clients(num_workers);
  for (int w = 0; w < num_workers; ++w) {
    absl::StatusOr<std::unique_ptr<worker::PsClient>> client = worker::PsClient::Create(
        plan, {}, workers[w].transport, workers[w].index, workers[w].incarnation);
    if (!client.ok()) {
      Result r;
      r.op = "sparse";
      r.error = std::string(client.status().message());
      return {r};
    }
    clients[w] = *std::move(client);
  }
  std::vector<worker::Values> out(num_workers);
  std::vector<int> next(num_workers, 0);

  for (const std::string op : {"sparse_pull", "sparse_push"}) {
    if (!options.Has(op)) continue;
    std::vector<Op> ops;
    for (int w = 0; w < num_workers; ++w) {
      worker::PsClient* client = clients[w].get();
      Worker* me = &workers[w];
      const std::vector<Batch>* mine = &batches[w];
      int* cursor = &next[w];
      worker::Values* values = &out[w];
      // Ids go out (8 bytes each) and rows come back or go out (dim floats),
      // both for distinct ids only: the client sends each id once.
      const bool pull = op == "sparse_pull";
      ops.push_back([=, &grads]() -> absl::StatusOr<double> {
        const Batch& batch = (*mine)[(*cursor)++ % kBatches];
        const worker::PsClient::TableIds tables[] = {{kTable, batch.ids}};
        if (pull) {
          PST_RETURN_IF_ERROR(client->PullRows(tables, values));
        } else {
          ++me->step;
          PST_RETURN_IF_ERROR(client->PushRows(me->step, tables, grads));
        }
        return static_cast<double>(batch.unique) * (8.0 + 4.0 * dim);
      });
    }
    Result r;
    r.op = op;
    r.rows = options.rows;
    r.dim = dim;
    r.table_rows = options.table_rows;
    std::printf("  running %s of %d rows x %d ...\n", op.c_str(), options.rows, dim);
    std::fflush(stdout);
    RunCase(cluster, ops, options.case_budget, options.min_iters, &r);
    FinishResult(&r);
    if (r.error.empty() && r.seconds > 0) {
      r.rows_per_s = static_cast<double>(r.ops) * options.rows / r.seconds;
      r.unique_rows_per_s = r.bytes / (8.0 + 4.0 * dim) / r.seconds;
    }
    results.push_back(r);
  }
  return results;
}

// ---------------------------------------------------------------------------
// Output.

std::string Rate(double per_s) {
  if (per_s >= 1e6) return absl::StrFormat("%.2fM", per_s / 1e6);
  if (per_s >= 1e3) return absl::StrFormat("%.1fK", per_s / 1e3);
  return absl::StrFormat("%.0f", per_s);
}

void PrintTable(const std::vector<Result>& results, const References& refs,
                const Options& options) {
  std::printf("\n%-12s %-10s %3s %3s %6s %8s %7s %9s %9s %9s %14s %8s %9s %9s\n", "op", "size",
              "ps", "w", "ops", "GB/s", "x tcp", "p50 ms", "p99 ms", "rows/s", "(distinct)",
              "ps cpu", "client", "ps rss");
  std::printf("%-12s %-10s %3s %3s %6s %8s %7s %9s %9s %9s %14s %8s %9s %9s\n", "", "", "", "", "",
              "", "", "", "", "", "", "s/GB", "cpu s/GB", "MB");
  for (const Result& r : results) {
    const std::string size =
        r.size_floats > 0 ? SizeName(r.size_floats) : absl::StrCat(r.rows, "x", r.dim);
    if (!r.error.empty()) {
      std::printf("%-12s %-10s %3d %3d  FAILED: %s\n", r.op.c_str(), size.c_str(), r.ps, r.workers,
                  r.error.c_str());
      continue;
    }
    const bool sparse = r.rows > 0;
    std::printf("%-12s %-10s %3d %3d %6lld %8.3f %7.3f %9.2f %9.2f %9s %14s %8.3f %9.3f %9.0f\n",
                r.op.c_str(), size.c_str(), r.ps, r.workers, static_cast<long long>(r.ops), r.gbps,
                refs.tcp_gbps > 0 ? r.gbps / refs.tcp_gbps : 0.0, r.p50_ms, r.p99_ms,
                sparse ? Rate(r.rows_per_s).c_str() : "-",
                sparse ? absl::StrCat("(", Rate(r.unique_rows_per_s), ")").c_str() : "",
                r.ps_cpu_s_per_gb, r.client_cpu_s_per_gb, r.ps_rss_bytes / 1e6);
  }
  std::printf(
      "\nGB/s: payload bytes pushed plus pulled per second, 1 GB = 1e9 bytes; x tcp: as a ratio "
      "of the one-stream TCP reference (%.2f GB/s). rows/s: ids requested per second (repeats "
      "included), distinct rows in parentheses. ps cpu s/GB: CPU seconds of all ps processes "
      "per GB moved; client: this process's.\n",
      refs.tcp_gbps);
  if (!options.link_rate.empty()) {
    std::printf(
        "Each ps sat behind a link shaped to %s each way (its own network namespace): compare "
        "GB/s with that rate per ps; x tcp still compares with loopback.\n",
        options.link_rate.c_str());
  }
  if (!absl::GetFlag(FLAGS_bdp_probe)) {
    std::printf(
        "Dense connections used a fixed %d MiB HTTP/2 window, no BDP probing "
        "(--bdp_probe=false).\n",
        common::kDenseWindowBytes >> 20);
  }
}

nlohmann::json ToJson(const std::vector<Result>& results, const References& refs,
                      const Options& options, double load_start, double load_end) {
  nlohmann::json j;
  j["loadavg_1m_start"] = load_start;
  j["loadavg_1m_end"] = load_end;
  j["tcp_reference_gbps"] = refs.tcp_gbps;
  j["tcp4_reference_gbps"] = refs.tcp4_gbps;
  j["memcpy_gbps"] = refs.memcpy_gbps;
  j["memcpy_bytes"] = refs.memcpy_bytes;
  nlohmann::json by = nlohmann::json::object(), by4 = nlohmann::json::object();
  for (const auto& [bytes, g] : refs.tcp_by_bytes) by[std::to_string(bytes)] = g;
  for (const auto& [bytes, g] : refs.tcp4_by_bytes) by4[std::to_string(bytes)] = g;
  j["tcp_reference_by_message_bytes"] = by;
  j["tcp4_reference_by_message_bytes"] = by4;
  j["cpus"] = std::thread::hardware_concurrency();
  j["seconds_per_case"] = absl::ToDoubleSeconds(options.case_budget);
  j["rounds"] = options.rounds;
  j["dense_piece_bytes"] = options.dense_piece_bytes;
  j["link_rate"] = options.link_rate;
  j["ps_replicas"] = options.ps_replicas;
  j["bdp_probe"] = absl::GetFlag(FLAGS_bdp_probe);
  j["results"] = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json e;
    e["op"] = r.op;
    if (r.size_floats > 0) e["size_floats"] = r.size_floats;
    if (r.rows > 0) {
      e["rows"] = r.rows;
      e["dim"] = r.dim;
      e["table_rows"] = r.table_rows;
    }
    e["ps"] = r.ps;
    e["workers"] = r.workers;
    if (!r.error.empty()) {
      e["error"] = r.error;
      j["results"].push_back(e);
      continue;
    }
    e["ops"] = r.ops;
    e["seconds"] = r.seconds;
    e["bytes"] = r.bytes;
    e["gbps"] = r.gbps;
    e["ratio_to_tcp"] = refs.tcp_gbps > 0 ? r.gbps / refs.tcp_gbps : 0.0;
    if (r.size_floats > 0) {
      auto it = refs.tcp_by_bytes.find(r.size_floats * 4);
      if (it != refs.tcp_by_bytes.end() && it->second > 0) {
        e["ratio_to_tcp_same_size"] = r.gbps / it->second;
      }
    }
    if (r.rows > 0) {
      e["rows_per_s"] = r.rows_per_s;
      e["unique_rows_per_s"] = r.unique_rows_per_s;
    }
    e["p50_ms"] = r.p50_ms;
    e["p99_ms"] = r.p99_ms;
    e["max_ms"] = r.max_ms;
    e["ps_cpu_s_per_gb"] = r.ps_cpu_s_per_gb;
    e["client_cpu_s_per_gb"] = r.client_cpu_s_per_gb;
    e["ps_rss_bytes"] = r.ps_rss_bytes;
    j["results"].push_back(e);
  }
  return j;
}

// One cluster shape: start the ps, create the variables, run every case,
// stop the ps.
absl::Status RunConfig(const Options& options, int num_ps, int num_workers,
                       std::vector<Result>* results) {
  std::printf("\n== %d ps, %d worker(s)%s%s\n", num_ps, num_workers,
              options.ps_replicas == 2 ? ", each shard backed up on the next ps" : "",
              options.link_rate.empty()
                  ? ""
                  : absl::StrCat(", each ps behind a ", options.link_rate, " link").c_str());
  std::fflush(stdout);
  PST_ASSIGN_OR_RETURN(std::unique_ptr<PsCluster> cluster,
                       PsCluster::Start(options, num_ps, num_workers));
  PST_ASSIGN_OR_RETURN(const proto::PlacementPlan plan, BuildPlan(options, num_ps));
  proto::OptimizerConfig sgd;
  sgd.set_name("sgd");
  sgd.set_learning_rate(1e-6f);
  const absl::Time create_start = absl::Now();
  if (options.ps_replicas == 2 && num_ps < 2) {
    return absl::InvalidArgumentError("--ps_replicas=2 needs --ps of 2 or more");
  }
  PST_RETURN_IF_ERROR(cluster->CreateVariables(plan, sgd, num_workers, options.ps_replicas));
  std::printf("  created %.1f MB of variables on %d ps in %.1f s (ps rss %.0f MB)\n",
              PlanBytes(plan) / 1e6, num_ps, absl::ToDoubleSeconds(absl::Now() - create_start),
              cluster->MemoryBytes("VmRSS") / 1e6);
  std::fflush(stdout);

  std::vector<Worker> workers(num_workers);
  std::mt19937_64 rng(absl::ToUnixNanos(absl::Now()));
  for (int w = 0; w < num_workers; ++w) {
    workers[w].index = w;
    workers[w].incarnation = rng() | 1;
    workers[w].transport = worker::MakeGrpcPsTransport(cluster->addresses(), options.rpc_timeout);
  }
  if (options.AnyDense()) {
    for (Result& r : RunDense(options, *cluster, plan, workers)) {
      r.ps = num_ps;
      r.workers = num_workers;
      results->push_back(std::move(r));
    }
  }
  if (options.AnySparse()) {
    for (Result& r : RunSparse(options, *cluster, plan, workers)) {
      r.ps = num_ps;
      r.workers = num_workers;
      results->push_back(std::move(r));
    }
  }
  std::printf("  ps peak rss %.0f MB for %.0f MB of variables\n",
              cluster->MemoryBytes("VmHWM") / 1e6, PlanBytes(plan) / 1e6);
  workers.clear();  // channels closed before the ps go
  cluster->Stop();
  return absl::OkStatus();
}

// What a second ps buys on one network: PushPull by 2 workers against 1
// ps, then against 2. On loopback every ps shares this machine's cores with
// the workers; behind shaped links each ps has a NIC of its own, as in a
// cluster, and the network is the limit more ps lift.
struct Scaling {
  std::string link_rate;  // empty: loopback
  double one_ps_gbps = 0, two_ps_gbps = 0;
  std::string skipped;  // why it did not run (no failure)
  std::string error;
};

Scaling RunScaling(const Options& options, const std::string& link_rate) {
  Scaling scaling;
  scaling.link_rate = link_rate;
  if (!link_rate.empty() && (geteuid() != 0 || tools::IpPath().empty())) {
    scaling.skipped = "shaped links need root and iproute2";
    return scaling;
  }
  Options o = options;
  o.sizes = {options.scaling_size};
  o.cases = {"pushpull"};
  o.link_rate = link_rate;
  for (int num_ps : {1, 2}) {
    std::vector<Result> results;
    const absl::Status status = RunConfig(o, num_ps, /*num_workers=*/2, &results);
    const std::string error = !status.ok()          ? std::string(status.message())
                              : results.size() != 1 ? "no result"
                                                    : results[0].error;
    if (!error.empty()) {
      scaling.error = absl::StrCat(num_ps, " ps: ", error);
      return scaling;
    }
    (num_ps == 1 ? scaling.one_ps_gbps : scaling.two_ps_gbps) = results[0].gbps;
  }
  return scaling;
}

std::string ScalingNetwork(const Scaling& s) {
  return s.link_rate.empty() ? "loopback" : s.link_rate + " link per ps";
}

void PrintScaling(const std::vector<Scaling>& scalings, const Options& options) {
  std::printf("\nscaling: PushPull of %s floats by 2 workers, against 1 ps and then 2 ps\n",
              SizeName(options.scaling_size).c_str());
  std::printf("  %-22s %10s %10s %12s\n", "network", "1 ps GB/s", "2 ps GB/s", "2 ps / 1 ps");
  for (const Scaling& s : scalings) {
    if (!s.skipped.empty() || !s.error.empty()) {
      std::printf("  %-22s %s: %s\n", ScalingNetwork(s).c_str(),
                  s.error.empty() ? "skipped" : "FAILED",
                  (s.error.empty() ? s.skipped : s.error).c_str());
      continue;
    }
    std::printf("  %-22s %10.3f %10.3f %11.2fx\n", ScalingNetwork(s).c_str(), s.one_ps_gbps,
                s.two_ps_gbps, s.one_ps_gbps > 0 ? s.two_ps_gbps / s.one_ps_gbps : 0.0);
  }
  std::printf(
      "On loopback the ps and the workers share this machine's cores, so a second ps adds no "
      "CPU; behind shaped links each ps has its own NIC, as on machines of their own.\n");
}

nlohmann::json ScalingJson(const std::vector<Scaling>& scalings, const Options& options) {
  nlohmann::json out = nlohmann::json::array();
  for (const Scaling& s : scalings) {
    nlohmann::json e = {{"op", "pushpull"},
                        {"size_floats", options.scaling_size},
                        {"workers", 2},
                        {"link_rate", s.link_rate}};
    if (!s.skipped.empty()) {
      e["skipped"] = s.skipped;
    } else if (!s.error.empty()) {
      e["error"] = s.error;
    } else {
      e["one_ps_gbps"] = s.one_ps_gbps;
      e["two_ps_gbps"] = s.two_ps_gbps;
      e["ratio"] = s.one_ps_gbps > 0 ? s.two_ps_gbps / s.one_ps_gbps : 0.0;
    }
    out.push_back(e);
  }
  return out;
}

int Run() {
  absl::StatusOr<Options> options = ParseOptions();
  if (!options.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (access(options->ps_server.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "ps_bench: no ps_server binary at %s (build it, or pass --ps_server)\n",
                 options->ps_server.c_str());
    return 2;
  }
  const double load_start = LoadAverage();
  std::printf(
      "ps_bench: %u cpus, load average %.2f; cases %s; %.1f s per case (dense cases in %d "
      "rounds), at least %d op(s) per worker\n",
      std::thread::hardware_concurrency(), load_start, absl::StrJoin(options->cases, ",").c_str(),
      absl::ToDoubleSeconds(options->case_budget), options->rounds, options->min_iters);
  std::printf("references:\n");
  std::fflush(stdout);
  std::vector<int64_t> message_bytes;
  if (options->AnyDense()) {
    for (int64_t s : options->sizes) message_bytes.push_back(s * 4);
  } else {
    message_bytes.push_back(int64_t{64} << 20);
  }
  std::sort(message_bytes.begin(), message_bytes.end());
  message_bytes.erase(std::unique(message_bytes.begin(), message_bytes.end()), message_bytes.end());
  absl::StatusOr<References> refs = MeasureReferences(message_bytes, options->reference_budget);
  if (!refs.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", std::string(refs.status().message()).c_str());
    return 1;
  }

  std::vector<Result> results;
  for (int num_ps : options->ps_counts) {
    for (int num_workers : options->worker_counts) {
      absl::Status status = RunConfig(*options, num_ps, num_workers, &results);
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
  if (options->scaling) {
    for (const std::string& rate : {std::string(), options->scaling_link_rate}) {
      scalings.push_back(RunScaling(*options, rate));
    }
  }

  const double load_end = LoadAverage();
  std::printf(
      "\nreferences: tcp 1 stream %.3f GB/s, 4 streams %.3f GB/s (best over message "
      "sizes); memcpy %.3f GB/s (%.0f MB buffers); load average %.2f at the start, "
      "%.2f at the end\n",
      refs->tcp_gbps, refs->tcp4_gbps, refs->memcpy_gbps, refs->memcpy_bytes / 1e6, load_start,
      load_end);
  PrintTable(results, *refs, *options);
  if (!scalings.empty()) PrintScaling(scalings, *options);
  bool failed = false;
  for (const Result& r : results) failed |= !r.error.empty();
  for (const Scaling& s : scalings) failed |= !s.error.empty();

  if (!options->json.empty()) {
    std::ofstream out(options->json);
    nlohmann::json j = ToJson(results, *refs, *options, load_start, load_end);
    if (!scalings.empty()) j["scaling"] = ScalingJson(scalings, *options);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "ps_bench: cannot write %s\n", options->json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", options->json.c_str());
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace pst::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Data-plane benchmark: starts ps_server processes and measures Push, Pull, PushPull, "
      "PullRows and PushRows against TCP and memcpy references.\n"
      "Usage: ps_bench [--ps=1] [--workers=1] [--sizes=1M,16M,64M] [--json=PATH]");
  pst::common::ParseCommandLineOrExit(argc, argv);
  // Its threads stand for workers, which tune the process the same way.
  pst::common::TuneForServing();
  pst::common::SetDenseBdpProbe(absl::GetFlag(FLAGS_bdp_probe));
  try {
    return pst::bench::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_bench: fatal: %s\n", e.what());
    return 1;
  }
}
