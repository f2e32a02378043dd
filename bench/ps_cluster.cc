#include "bench/ps_cluster.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
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

std::unique_ptr<proto::ParameterServer::Stub> PsStub(const std::string& address) {
  return proto::ParameterServer::NewStub(rpc::MakeChannel(address, rpc::RpcSettings()));
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
    PST_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> ps,
                         ChildProcess::Start(spawn, absl::StrCat("ps:", i), options.verbose));
    cluster->ps_.push_back(std::move(ps));
    cluster->addresses_.push_back(tf.cluster.ps[i]);
  }
  // Every ps answers Health once it serves.
  for (int i = 0; i < num_ps; ++i) {
    auto stub = PsStub(cluster->addresses_[i]);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(30), /*wait_for_ready=*/true);
    proto::HealthRequest request;
    proto::HealthResponse response;
    grpc::Status status = stub->Health(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("ps ", i, " (", options.ps_server, " at ", cluster->addresses_[i],
                       ") did not come up: ", status.error_message(), cluster->Tail(i)));
    }
  }
  return cluster;
}

PsCluster::~PsCluster() { Stop(); }

absl::StatusOr<int64_t> PsCluster::TableEvictions() const {
  int64_t total = 0;
  for (const std::string& address : addresses_) {
    auto stub = PsStub(address);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(30), /*wait_for_ready=*/false);
    proto::HealthRequest request;
    proto::HealthResponse response;
    grpc::Status status = stub->Health(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("Health of ps at ", address, ": ", status.error_message()));
    }
    total += response.table_evictions();
  }
  return total;
}

std::vector<std::string> PsCluster::addresses() const { return addresses_; }

std::string PsCluster::Tail(int i) { return ps_[i]->Tail(); }

absl::Status PsCluster::CheckAlive() {
  for (const auto& p : ps_) {
    if (std::string exit = p->DescribeExit(); !exit.empty()) {
      return absl::UnavailableError(exit);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> PsCluster::CpuSeconds() const {
  double total = 0;
  for (const auto& p : ps_) {
    PST_ASSIGN_OR_RETURN(const double s, ProcessCpuSeconds(p->pid()));
    total += s;
  }
  return total;
}

int64_t PsCluster::MemoryBytes(const std::string& field) const {
  int64_t total = 0;
  for (const auto& p : ps_) total += ProcessMemoryBytes(p->pid(), field);
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
    auto stub = PsStub(addresses_[i]);
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
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (ps_[i]->Poll().has_value()) continue;
    auto stub = PsStub(addresses_[i]);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(5));
    proto::ShutdownRequest request;
    request.set_reason("ps_bench is done");
    proto::ShutdownResponse response;
    (void)stub->Shutdown(&context, request, &response);
  }
  for (const auto& p : ps_) p->Stop(absl::Seconds(10));
  ps_.clear();
  addresses_.clear();
}

}  // namespace pst::bench
