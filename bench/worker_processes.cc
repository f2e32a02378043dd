#include "bench/worker_processes.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/proc_stats.h"

namespace pst::bench {
namespace {

using nlohmann::json;

// Spare time an answer may take past the work it waits for.
constexpr absl::Duration kSlack = absl::Seconds(60);

// This executable's path.
absl::StatusOr<std::string> SelfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return absl::InternalError(absl::StrCat("/proc/self/exe: ", std::strerror(errno)));
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcesses>> WorkerProcesses::Start(
    const Options& options, const proto::PlacementPlan& plan, const PsCluster& cluster,
    int num_workers) {
  std::unique_ptr<WorkerProcesses> out(new WorkerProcesses(options.rpc_timeout));
  absl::StatusOr<std::string> self = SelfPath();
  if (!self.ok()) return self.status();
  for (int w = 0; w < num_workers; ++w) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
    }
    tools::SpawnOptions spawn;
    spawn.argv = {*self, "--worker_channel_fd=3"};
    spawn.pass_fd = fds[1];
    absl::StatusOr<std::unique_ptr<ChildProcess>> process =
        ChildProcess::Start(spawn, absl::StrCat("worker:", w), options.verbose);
    close(fds[1]);  // the child's end, now in the child
    if (!process.ok()) {
      close(fds[0]);
      return process.status();
    }
    out->workers_.push_back({*std::move(process), std::make_unique<MessageChannel>(fds[0])});
  }
  std::mt19937_64 rng(absl::ToUnixNanos(absl::Now()) ^ 0x5eed);
  std::string plan_bytes;
  plan.SerializeToString(&plan_bytes);
  const std::string plan_b64 = absl::Base64Escape(plan_bytes);
  for (int w = 0; w < num_workers; ++w) {
    const json setup = {{"cmd", "setup"},
                        {"plan", plan_b64},
                        {"addresses", cluster.addresses()},
                        {"index", w},
                        {"incarnation", rng() | 1},
                        {"bdp_probe", options.bdp_probe},
                        {"rpc_timeout_s", absl::ToDoubleSeconds(options.rpc_timeout)}};
    absl::Status sent = out->workers_[w].channel->Send(setup);
    absl::StatusOr<json> answer = sent.ok() ? out->workers_[w].channel->Receive(kSlack)
                                            : absl::StatusOr<json>(sent);
    if (answer.ok() && answer->contains("error")) {
      answer = absl::UnavailableError(answer->at("error").get<std::string>());
    }
    if (!answer.ok()) return absl::UnavailableError(out->Describe(w, answer.status()));
  }
  return out;
}

WorkerProcesses::~WorkerProcesses() {
  for (Worker& w : workers_) (void)w.channel->Send({{"cmd", "quit"}});
  for (Worker& w : workers_) w.process->Stop(absl::Seconds(10));
}

std::string WorkerProcesses::Describe(int w, const absl::Status& status) {
  std::string out = absl::StrCat("worker process ", w, ": ", status.message());
  // Its channel's end is the process's (it quits or dies): take its exit,
  // ending it if it lingers.
  if (absl::IsUnavailable(status)) workers_[w].process->Stop(absl::Seconds(2));
  if (std::string exit = workers_[w].process->DescribeExit(); !exit.empty()) {
    absl::StrAppend(&out, " [", exit, "]");
  }
  return out;
}

absl::Status WorkerProcesses::Exchange(const json& message, absl::Duration timeout,
                                       std::vector<json>* answers) {
  answers->assign(workers_.size(), json());
  absl::Status first;
  std::vector<bool> sent(workers_.size(), false);
  for (size_t w = 0; w < workers_.size(); ++w) {
    absl::Status s = workers_[w].channel->Send(message);
    sent[w] = s.ok();
    if (!s.ok() && first.ok()) first = absl::UnavailableError(Describe(static_cast<int>(w), s));
  }
  // Every answer is taken, even after a failure, so that none is left to
  // be mistaken for the next message's.
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!sent[w]) continue;
    absl::StatusOr<json> answer = workers_[w].channel->Receive(timeout);
    if (answer.ok() && answer->contains("error")) {
      answer = absl::InternalError(answer->at("error").get<std::string>());
    }
    if (!answer.ok()) {
      if (first.ok()) first = absl::Status(answer.status().code(),
                                           Describe(static_cast<int>(w), answer.status()));
      continue;
    }
    (*answers)[w] = *std::move(answer);
  }
  return first;
}

void WorkerProcesses::RunCase(PsCluster& cluster, const DenseCase& c, absl::Duration budget,
                              int min_iters, Result* result) {
  if (!BeginRun(cluster, static_cast<int>(workers_.size()), result)) return;
  std::vector<json> answers;
  const json prepare = {
      {"cmd", "prepare"}, {"op", c.op}, {"size", c.size_floats}, {"wire", c.wire}};
  if (absl::Status s = Exchange(prepare, rpc_timeout_ + kSlack, &answers); !s.ok()) {
    FailRun(cluster, std::string(s.message()), result);
    return;
  }
  const absl::StatusOr<double> cpu0 = cluster.CpuSeconds();
  const absl::Time start = absl::Now();
  const json run = {{"cmd", "run"},
                    {"budget_s", absl::ToDoubleSeconds(budget)},
                    {"min_iters", min_iters}};
  // A worker's operations may each take up to the RPC deadline.
  const absl::Duration timeout = budget + rpc_timeout_ * (min_iters + 1) + kSlack;
  if (absl::Status s = Exchange(run, timeout, &answers); !s.ok()) {
    FailRun(cluster, std::string(s.message()), result);
    return;
  }
  const absl::Time end = absl::Now();
  const absl::StatusOr<double> cpu1 = cluster.CpuSeconds();
  TimedRun timed;
  timed.seconds = absl::ToDoubleSeconds(end - start);
  timed.ps_cpu_s = CpuBetween(cpu0, cpu1);
  try {
    for (const json& a : answers) {
      timed.latencies_ms.push_back(a.at("latencies_ms").get<std::vector<double>>());
      timed.bytes += a.at("bytes").get<double>();
      timed.client_cpu_s += a.at("cpu_s").get<double>();
    }
  } catch (const std::exception& e) {
    result->error = absl::StrCat("a worker process's answer lacks a figure: ", e.what());
    return;
  }
  AddRun(cluster, std::move(timed), result);
}

}  // namespace pst::bench
