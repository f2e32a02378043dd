#include "evaluator/builtin_eval.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/ps_peers.h"
#include "client/ps_client.h"
#include "common/checkpoint_chain.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "ps_server/in_process_control.h"
#include "ps_server/in_process_ps.h"
#include "ps_server/in_process_transport.h"

namespace pst::evaluator {

absl::StatusOr<const models::Model*> BuiltinEvaluation::ModelToEvaluate(
    const proto::TrainingConfig& training) {
  PST_ASSIGN_OR_RETURN(const models::Model* model, models::ModelFor(training));
  if (model->computed_by_workers()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", training.model(), "' is computed by its workers: evaluate it in Python with ",
        "pstrain.Evaluator (pstrain local --evaluator_command=...)"));
  }
  return model;
}

absl::StatusOr<std::map<std::string, double>> BuiltinEvaluation::Evaluate(
    const FoundCheckpoint& checkpoint) {
  const proto::TrainingConfig& training = checkpoint.manifest.training();
  PST_ASSIGN_OR_RETURN(const models::Model* model, ModelToEvaluate(training));
  PST_ASSIGN_OR_RETURN(std::vector<models::ModelVariable> variables, model->Variables(training));

  // One ps holds everything (one copy); the restore reads every shard and
  // keeps it all.
  proto::TrainingConfig one_copy = training;
  one_copy.set_ps_replicas(1);
  proto::ClusterState state;
  PST_ASSIGN_OR_RETURN(*state.mutable_plan(), models::BuildPlan(one_copy, 1));
  *state.mutable_training() = one_copy;
  state.set_num_workers(std::max(1, checkpoint.manifest.worker_positions_size()));
  ps::InProcessPs::Options ps_options;
  ps_options.checkpoint_dir = std::filesystem::path(checkpoint.path).parent_path().string();
  auto ps = std::make_shared<ps::InProcessPs>(1, ps_options);
  ps::InProcessPsControl control(ps);
  common::StopSignal never;
  PST_RETURN_IF_ERROR(chief::CreatePlanOnPs(control, 0, 0, "in-process ps", state, nullptr,
                                            absl::InfiniteFuture(), *common::RealClock(), never)
                          .status());
  PST_ASSIGN_OR_RETURN(proto::RestoreRequest restore, common::RestoreRequestFor(checkpoint.path));
  restore.set_generation(0);
  PST_RETURN_IF_ERROR(control.Restore(0, restore, absl::InfiniteDuration()).status());

  const std::string data_key = training.SerializeAsString();
  if (held_out_ == nullptr || data_for_ != data_key) {
    PST_ASSIGN_OR_RETURN(held_out_, model->Load(training, data_dir_, /*held_out=*/true, 0, 1));
    data_for_ = data_key;
  }
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<client::PsClient> client,
      client::PsClient::Create(state.plan(), models::DenseNames(variables),
                               std::make_shared<ps::InProcessPsTransport>(ps), -1, 0));
  PST_ASSIGN_OR_RETURN(models::ModelEvaluation eval,
                       model->Evaluate(training, *held_out_, client.get()));
  std::map<std::string, double> metrics;
  for (const auto& [name, value] : eval.metrics) metrics[name] = value;
  for (const auto& [name, value] : eval.counts) metrics[name] = static_cast<double>(value);
  return metrics;
}

}  // namespace pst::evaluator
