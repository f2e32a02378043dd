#include "tools/reference.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "ps_server/in_process_transport.h"

namespace pst::tools {

absl::StatusOr<nlohmann::json> TrainReference(const proto::TrainingConfig& training, int num_ps,
                                              const std::string& data_dir) {
  PST_ASSIGN_OR_RETURN(const models::Model* model, models::ModelFor(training));
  if (model->computed_by_workers()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", training.model(), "' is computed by its workers, not by pstrain: there is "
        "nothing to train a reference with"));
  }
  // In-process ps: one copy of each shard, whatever the job's --ps_replicas.
  proto::TrainingConfig one_copy = training;
  one_copy.set_ps_replicas(1);
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan plan, models::BuildPlan(one_copy, num_ps));
  PST_ASSIGN_OR_RETURN(std::vector<models::ModelVariable> variables,
                       models::ModelVariables(training));
  auto transport = std::make_shared<ps::InProcessPsTransport>(num_ps);
  for (int p = 0; p < num_ps; ++p) {
    proto::CreateVariablesRequest request;
    *request.mutable_optimizer() = training.optimizer();
    for (const auto& entry : plan.variables()) {
      if (entry.ps_index() == p) *request.add_variables() = entry.spec();
    }
    PST_RETURN_IF_ERROR(transport->store(p)->Create(request).status());
  }
  PST_ASSIGN_OR_RETURN(std::unique_ptr<client::PsClient> client,
                       client::PsClient::Create(plan, models::DenseNames(variables), transport,
                                                /*worker_index=*/0, /*incarnation=*/1));
  PST_ASSIGN_OR_RETURN(std::unique_ptr<models::ModelData> train,
                       model->Load(training, data_dir, /*held_out=*/false, 0, 1));
  PST_ASSIGN_OR_RETURN(std::unique_ptr<models::ModelData> held_out,
                       model->Load(training, data_dir, /*held_out=*/true, 0, 1));
  const absl::Time start = absl::Now();
  PST_ASSIGN_OR_RETURN(
      int64_t step, model->Train(training, *train, /*shuffle_seed=*/training.seed(), client.get(),
                                 models::LoopControl()));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  PST_ASSIGN_OR_RETURN(models::ModelEvaluation eval,
                       model->Evaluate(training, *held_out, client.get()));
  nlohmann::json result;
  for (const auto& [name, value] : eval.metrics) result[name] = value;
  for (const auto& [name, value] : eval.counts) result[name] = value;
  result["global_step"] = step;
  result["train_seconds"] = seconds;
  result["examples_per_sec"] =
      seconds > 0 ? static_cast<double>(train->size()) * training.epochs() / seconds : 0.0;
  return result;
}

double Imbalance(const proto::PlacementPlan& plan) {
  const std::vector<int64_t> bytes = common::BytesPerPs(plan);
  if (bytes.empty()) return 1.0;
  double total = 0;
  for (int64_t b : bytes) total += static_cast<double>(b);
  const double mean = total / bytes.size();
  return mean > 0 ? *std::max_element(bytes.begin(), bytes.end()) / mean : 1.0;
}

std::string FormatPlan(const proto::PlacementPlan& plan) {
  std::string out = absl::StrFormat("placement: %s over %d ps\n\n", plan.policy(), plan.num_ps());
  // Partitioned tables first, as the logical variables they are.
  std::vector<std::string> tables;
  absl::flat_hash_map<std::string, const proto::VariableSpec*> first_part;
  for (const auto& entry : plan.variables()) {
    const proto::VariableSpec& spec = entry.spec();
    if (spec.variable().empty() || first_part.contains(spec.variable())) continue;
    first_part[spec.variable()] = &spec;
    tables.push_back(spec.variable());
  }
  for (const std::string& table : tables) {
    const proto::VariableSpec& spec = *first_part[table];
    const char* routing = spec.routing() == proto::MOD   ? "mod"
                          : spec.routing() == proto::DIV ? "div"
                                                         : "hash";
    absl::StrAppendFormat(&out, "%s %s: %d partition(s), '%s' routing\n", table,
                          spec.routing() == proto::HASH
                              ? absl::StrCat("[hash, ", spec.full_shape(1), "]")
                              : common::ShapeString(spec.full_shape()),
                          spec.num_partitions(), routing);
  }
  if (!tables.empty()) out += "\n";
  absl::StrAppendFormat(&out, "%-36s %-18s %14s %4s  %s\n", "variable", "shape", "bytes", "ps",
                        "optimizer");
  for (const auto& entry : plan.variables()) {
    const proto::VariableSpec& spec = entry.spec();
    std::string shape = common::ShapeString(spec.shape());
    if (spec.routing() == proto::HASH) shape = absl::StrCat("hash x ", spec.shape(1));
    // Its own (its group's or the job's), as the chief resolved it.
    const proto::OptimizerConfig& opt = spec.optimizer();
    const std::string optimizer =
        opt.name().empty() ? "" : absl::StrCat(opt.name(), opt.form() == "torch" ? " (torch)" : "");
    absl::StrAppendFormat(&out, "%-36s %-18s %14d %4d  %s\n", spec.name(), shape,
                          common::SpecBytes(spec), entry.ps_index(), optimizer);
  }
  const std::vector<int64_t> bytes = common::BytesPerPs(plan);
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  absl::StrAppendFormat(&out, "\n%-4s %16s %8s\n", "ps", "bytes", "share");
  for (size_t p = 0; p < bytes.size(); ++p) {
    absl::StrAppendFormat(&out, "%-4d %16d %7.2f%%\n", p, bytes[p],
                          total > 0 ? 100.0 * bytes[p] / total : 0.0);
  }
  absl::StrAppendFormat(&out, "total %15d bytes\nimbalance (most-loaded ps / mean): %.4f\n", total,
                        Imbalance(plan));
  if (plan.replicas() == 2) {
    // Each ps also holds a backup: the shard of the ps before it.
    absl::StrAppendFormat(&out, "\n2 copies of each shard (--ps_replicas=2):\n%-6s %8s %8s %16s\n",
                          "shard", "primary", "backup", "bytes on backup");
    for (const proto::ShardCopies& copies : plan.shards()) {
      const int shard = copies.primary();
      absl::StrAppendFormat(&out, "%-6d %8d %8d %16d\n", shard, copies.primary(), copies.backup(),
                            shard < static_cast<int>(bytes.size()) ? bytes[shard] : 0);
    }
  }
  return out;
}

}  // namespace pst::tools
