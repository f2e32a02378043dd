// The ps daemon's serving loop: the gRPC service over a store, parked pulls
// expired, the chief's silence watched, a drained shutdown.
#include "ps_server/run_ps.h"

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/grpc_channel.h"
#include "common/logging.h"
#include "common/transport_security.h"
#include "ps_server/grpc_ps_service.h"
#include "ps_server/replication/grpc_replica_link.h"
#include "ps_server/store/store_metrics.h"

namespace pst::ps {

absl::Status RunPs(PsDaemonOptions options, common::StopSignal& stop) {
  if (!options.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.checkpoint_dir, ec);
    if (ec || !std::filesystem::is_directory(options.checkpoint_dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--checkpoint_dir=", options.checkpoint_dir,
                       ": cannot create it: ", ec ? ec.message() : "not a directory"));
    }
  }
  const std::string task = common::TaskIdString(options.tf.task);
  // Declared before the exporter, so that it outlives every scrape.
  VariableStore store(options.store);
  const std::unique_ptr<common::MetricsExporter> metrics = std::move(options.metrics);
  if (metrics != nullptr) {
    ExportStoreMetrics(&store, metrics.get());
    metrics->SetRawMethods(GrpcPsService::RawMethodNames());
    spdlog::info("Prometheus metrics on {} at /metrics", metrics->address());
  }
  const std::vector<std::string> peers = options.tf.cluster.ps;
  auto link_to = [peers, settings = options.rpc, timeout = options.replica_timeout,
                  connect = std::max(options.replica_timeout, options.replica_connect_timeout)](
                     int index) -> std::unique_ptr<ReplicaLink> {
    if (index < 0 || index >= static_cast<int>(peers.size())) return nullptr;
    return MakeGrpcReplicaLink(peers[index], settings, timeout, connect);
  };
  PsNode::Options node;
  node.ps_index = options.tf.task.index;
  node.task = task;
  node.incarnation = options.incarnation;
  node.checkpoint_dir = options.checkpoint_dir;
  node.save_delay = options.save_delay;
  node.link_to = std::move(link_to);
  GrpcPsService service(&store, std::move(node), &stop, options.rpc);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = rpc::StartServer(
      options.tf.SelfAddress(), {{&service, proto::ParameterServer::service_full_name()}},
      options.rpc, options.bind, metrics.get());
  if (!server.ok()) return server.status();
  spdlog::info("serving on {} (advertised as {}, {}{}), incarnation {:016x}",
               rpc::ListenAddress(options.tf.SelfAddress(), options.bind),
               options.tf.SelfAddress(),
               common::DescribeTransportSecurity(options.rpc.security),
               options.rpc.dense_bdp_probe ? std::string()
                                 : absl::StrCat(", fixed ", rpc::kDenseWindowBytes >> 20,
                                                " MiB HTTP/2 windows"),
               options.incarnation);

  absl::Status result;
  while (!stop.WaitFor(absl::Seconds(1))) {
    int expired = 0;
    for (const auto& served : service.PrimaryStores()) {
      expired += served->ExpireParked(options.max_park);
    }
    if (expired > 0) {
      spdlog::warn("answered {} pull(s) that waited longer than --max_park_s={} s", expired,
                   absl::ToDoubleSeconds(options.max_park));
    }
    if (options.chief_timeout > absl::ZeroDuration() &&
        absl::Now() - service.last_chief_contact() > options.chief_timeout) {
      result = absl::UnavailableError(
          absl::StrCat("no word from the chief for ", absl::ToDoubleSeconds(options.chief_timeout),
                       " s (--chief_timeout_s); giving up"));
      stop.Stop(std::string(result.message()));
    }
  }
  (result.ok() ? spdlog::info("stopping: {}", stop.reason())
               : spdlog::error("stopping: {}", stop.reason()));
  for (const auto& served : service.PrimaryStores()) {
    served->CancelAllWaiters(absl::UnavailableError("the ps is shutting down"));
  }
  service.StopBackgroundWork();  // a save in progress finishes its file; no new one starts
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  const VariableStore::Stats stats = store.GetStats();
  spdlog::info("exiting: {} variable(s), {} push(es) applied", stats.num_variables,
               stats.pushes_applied);
  return result;
}

}  // namespace pst::ps
