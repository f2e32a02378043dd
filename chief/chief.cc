#include "chief/chief.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "chief/coordinator.h"
#include "chief/grpc_coordinator_service.h"
#include "chief/job.h"
#include "chief/summary.h"
#include "client/grpc_ps_control.h"
#include "client/grpc_ps_transport.h"
#include "client/ps_client.h"
#include "client/shard_routes.h"
#include "rpc/grpc_channel.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/ps_control.h"
#include "common/status_macros.h"
#include "common/transport_security.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::chief {
namespace {

// The model's quality on held-out data, with the parameters the ps hold now
// (a model computed by its workers only: the version they reached).
absl::StatusOr<EvalResult> Evaluate(const proto::ClusterState& state, const ChiefOptions& options) {
  PST_ASSIGN_OR_RETURN(const models::Model* model, models::ModelFor(options.training));
  PST_ASSIGN_OR_RETURN(std::vector<models::ModelVariable> variables,
                       model->Variables(options.training));
  const std::vector<std::string> addresses(state.ps_addresses().begin(),
                                           state.ps_addresses().end());
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<client::PsClient> client,
      client::PsClient::Create(
          state.plan(), models::DenseNames(variables),
          client::MakeRoutedTransport(
              client::MakeGrpcPsTransport(addresses, options.rpc, options.timing.rpc_timeout),
              client::ShardRoutes::FromPlan(state.plan(), state.routing_version())),
          -1, 0));
  if (model->computed_by_workers()) {
    // Nothing here can score it: report the step the dense variables reached.
    EvalResult result;
    result.metrics = nlohmann::json::object();
    client::Values params;
    PST_ASSIGN_OR_RETURN(const int64_t version, client->Pull(&params));
    result.global_step = params.empty() ? state.global_step() : version;
    result.line = absl::StrCat("not evaluated: model '", options.training.model(),
                               "' is computed by its workers");
    return result;
  }
  PST_ASSIGN_OR_RETURN(std::unique_ptr<models::ModelData> held_out,
                       model->Load(options.training, options.data_dir, /*held_out=*/true, 0, 1));
  PST_ASSIGN_OR_RETURN(models::ModelEvaluation eval,
                       model->Evaluate(options.training, *held_out, client.get()));
  EvalResult result;
  for (const auto& [name, value] : eval.metrics) result.metrics[name] = value;
  for (const auto& [name, value] : eval.counts) result.metrics[name] = value;
  result.line = eval.line;
  result.global_step = eval.global_step;
  return result;
}

}  // namespace

int64_t ExpectedFinalStep(const proto::TrainingConfig& training, int num_workers,
                          int64_t num_examples) {
  int64_t from_epochs = 0;
  const int64_t batch = training.batch_size();
  if (num_examples > 0 && batch > 0 && num_workers > 0) {
    const bool sync = training.sync().mode() == proto::SYNC;
    for (int64_t i = 0; i < num_workers; ++i) {
      const int64_t shard =
          num_examples > i ? (num_examples - i + num_workers - 1) / num_workers : 0;
      const int64_t batches = (shard + batch - 1) / batch * training.epochs();
      from_epochs = sync ? std::max(from_epochs, batches) : from_epochs + batches;
    }
  }
  if (training.max_steps() > 0) {
    return from_epochs > 0 ? std::min(from_epochs, training.max_steps()) : training.max_steps();
  }
  return from_epochs;
}

absl::Status RunChief(const ChiefOptions& options, const common::StopSignal& stop) {
  const absl::Time job_start = absl::Now();
  const common::ClusterSpec& cluster = options.tf.cluster;
  const common::Timing& timing = options.timing;
  PST_ASSIGN_OR_RETURN(const JobPlan plan, PlanJob(options));

  // Serve the coordinator from the start, so workers can find it; they are
  // told to retry until the variables exist.
  Coordinator coordinator(plan.initial, timing.peer_timeout);
  std::optional<ChiefMetrics> metrics;
  if (options.metrics != nullptr)
    metrics.emplace(options.metrics, &coordinator, options.training.optimizer());
  EvaluationHistory evaluations(static_cast<int>(cluster.evaluator.size()), job_start);
  GrpcCoordinatorService service(&coordinator, &evaluations, options.rpc);
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<grpc::Server> server,
      rpc::StartServer(cluster.CoordinatorAddress(),
                          {{&service, proto::Coordinator::service_full_name()}}, options.rpc,
                          options.bind, options.metrics));
  spdlog::info("coordinator serving on {} (advertised as {}, {})",
               rpc::ListenAddress(cluster.CoordinatorAddress(), options.bind),
               cluster.CoordinatorAddress(),
               common::DescribeTransportSecurity(options.rpc.security));

  const std::unique_ptr<common::PsControl> ps = client::MakeGrpcPsControl(cluster.ps, options.rpc);
  Job::Collaborators with;
  with.ps = ps.get();
  with.coordinator = &coordinator;
  with.evaluate = [&options](const proto::ClusterState& state) {
    return Evaluate(state, options);
  };
  if (metrics.has_value()) with.metrics = &*metrics;
  with.evaluations = &evaluations;
  with.job_start = job_start;
  Job job(options, plan, std::move(with), stop);
  const absl::Status status = job.Run();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  spdlog::info("chief finished; peak resident memory {:.1f} MB",
               static_cast<double>(common::PeakResidentBytes()) / 1e6);
  return status;
}

}  // namespace pst::chief
