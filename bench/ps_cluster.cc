#include "bench/ps_cluster.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/proc_stats.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "proto/pstrain.grpc.pb.h"
#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
#include "tools/shaped_link.h"
#include "tools/subprocess.h"

namespace pst::bench {
namespace {

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

}  // namespace

absl::StatusOr<std::unique_ptr<PsCluster>> PsCluster::Start(const Options& options, int num_ps,
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
      absl::StatusOr<std::unique_ptr<tools::ShapedLink>> made =
          tools::ShapedLink::Create(options.link_rate, /*routed=*/options.ps_replicas == 2);
      if (!made.ok()) {
        return absl::Status(made.status().code(),
                            absl::StrCat("--link_rate: ", made.status().message()));
      }
      std::unique_ptr<tools::ShapedLink> link = *std::move(made);
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
                  absl::StrCat("--bdp_probe=", options.bdp_probe)};
    if (!options.table_store_dir.empty()) {
      spawn.argv.push_back(absl::StrCat("--table_store_dir=", options.table_store_dir, "/ps", i));
    }
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
    auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(cluster->ps_[i]->address, rpc::RpcSettings()));
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(30), /*wait_for_ready=*/true);
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

PsCluster::~PsCluster() { Stop(); }

absl::StatusOr<int64_t> PsCluster::TableEvictions() const {
  int64_t total = 0;
  for (const auto& p : ps_) {
    auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(p->address, rpc::RpcSettings()));
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(30), /*wait_for_ready=*/false);
    proto::HealthRequest request;
    proto::HealthResponse response;
    grpc::Status status = stub->Health(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("Health of ps at ", p->address, ": ", status.error_message()));
    }
    total += response.table_evictions();
  }
  return total;
}

std::vector<std::string> PsCluster::addresses() const {
  std::vector<std::string> out;
  for (const auto& p : ps_) out.push_back(p->address);
  return out;
}

std::string PsCluster::Tail(int i) {
  absl::MutexLock lock(&ps_[i]->mu);
  if (ps_[i]->tail.empty()) return "";
  return absl::StrCat("; its last output:\n  ", absl::StrJoin(ps_[i]->tail, "\n  "));
}

absl::Status PsCluster::CheckAlive() {
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

absl::StatusOr<double> PsCluster::CpuSeconds() const {
  double total = 0;
  for (const auto& p : ps_) {
    PST_ASSIGN_OR_RETURN(const double s, ProcessCpuSeconds(p->pid));
    total += s;
  }
  return total;
}

int64_t PsCluster::MemoryBytes(const std::string& field) const {
  int64_t total = 0;
  for (const auto& p : ps_) total += ProcessMemoryBytes(p->pid, field);
  return total;
}

absl::Status PsCluster::CreateVariables(const proto::PlacementPlan& plan,
                                        const proto::OptimizerConfig& optimizer, int num_workers,
                                        int replicas) {
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
    auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(ps_[i]->address, rpc::RpcSettings()));
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(120));
    proto::CreateVariablesResponse response;
    grpc::Status status = stub->CreateVariables(&context, request, &response);
    if (!status.ok()) {
      absl::Status s = rpc::FromGrpcStatus(status);
      return absl::Status(
          s.code(), absl::StrCat("creating the variables on ps ", i, ": ", s.message(), Tail(i)));
    }
  }
  return absl::OkStatus();
}

void PsCluster::Stop() {
  for (auto& p : ps_) {
    if (p->exited) continue;
    auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(p->address, rpc::RpcSettings()));
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(5));
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

}  // namespace pst::bench
