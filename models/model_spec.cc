#include "models/model_spec.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/optimizer_groups.h"
#include "common/partition.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "models/registry.h"

namespace pst::models {
namespace {

// Rows a hash embedding is assumed to reach, for placement only.
constexpr int64_t kHashRowGuess = 1 << 20;

proto::VariableSpec DenseSpec(const ParamSpec& param, uint64_t seed) {
  proto::VariableSpec spec;
  spec.set_name(param.name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : param.shape) spec.add_shape(d);
  proto::Initializer* init = spec.mutable_initializer();
  if (param.is_kernel) {
    init->set_kind(proto::Initializer::GLOROT_UNIFORM);
    init->set_seed(seed);
  } else {
    init->set_kind(proto::Initializer::ZEROS);
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::vector<ModelVariable>> ModelVariables(const proto::TrainingConfig& training) {
  PST_ASSIGN_OR_RETURN(const Model* model, ModelFor(training));
  PST_ASSIGN_OR_RETURN(std::vector<ModelVariable> vars, model->Variables(training));
  // The job's table bound, for every hash embedding that sets none itself.
  for (ModelVariable& var : vars) {
    proto::VariableSpec& spec = var.spec;
    const bool hash = spec.shape_size() > 0 && spec.shape(0) == 0;
    if (!hash || spec.capacity() != 0 || !spec.eviction().empty()) continue;
    spec.set_capacity(training.table_capacity());
    spec.set_eviction(training.table_eviction());
  }
  return vars;
}

std::vector<ModelVariable> DenseVariables(const std::vector<ParamSpec>& params, uint64_t seed) {
  std::vector<ModelVariable> vars;
  for (size_t i = 0; i < params.size(); ++i) {
    vars.push_back({DenseSpec(params[i], seed * 1000003u + i), false});
  }
  return vars;
}

std::vector<std::string> DenseNames(const std::vector<ModelVariable>& variables) {
  std::vector<std::string> names;
  for (const ModelVariable& v : variables) {
    if (!v.table) names.push_back(v.spec.name());
  }
  return names;
}

std::vector<common::GroupedVariable> GroupedVariables(const std::vector<ModelVariable>& variables) {
  std::vector<common::GroupedVariable> out;
  for (const ModelVariable& v : variables) out.push_back({v.spec.name(), v.table});
  return out;
}

absl::StatusOr<proto::PlacementPlan> BuildPlan(const proto::TrainingConfig& training, int num_ps) {
  absl::StatusOr<std::vector<ModelVariable>> vars = ModelVariables(training);
  if (!vars.ok()) return vars.status();
  if (absl::Status s = common::CheckOptimizerGroups(training, GroupedVariables(*vars)); !s.ok()) {
    return s;
  }
  std::vector<proto::VariableSpec> specs;
  const proto::Partitioner& partitioner = training.partitioner();
  std::vector<std::string> dense, tables;
  for (ModelVariable var : *vars) {
    (var.table ? tables : dense).push_back(var.spec.name());
    // Each piece and partition carries its variable's optimizer.
    *var.spec.mutable_optimizer() = common::OptimizerOf(training, {var.spec.name(), var.table});
    if (!var.table) {
      absl::StatusOr<std::vector<proto::VariableSpec>> pieces =
          common::SplitDense(var.spec, training.dense_piece_bytes());
      if (!pieces.ok()) return pieces.status();
      specs.insert(specs.end(), pieces->begin(), pieces->end());
      continue;
    }
    const int64_t rows = var.spec.shape(0);
    const int64_t row_bytes = var.spec.shape(1) * static_cast<int64_t>(sizeof(float));
    absl::StatusOr<int> parts = 1;
    proto::Routing routing = training.routing() == proto::DIV ? proto::DIV : proto::MOD;
    if (rows == 0) {  // hash embedding: one partition per ps unless told otherwise
      routing = proto::HASH;
      parts = partitioner.kind() == "fixed" && partitioner.num_shards() > 0
                  ? partitioner.num_shards()
                  : num_ps;
    } else if (partitioner.kind() == "fixed") {
      parts = common::FixedPartitions(rows, partitioner.num_shards());
    } else if (partitioner.kind() == "min_max") {
      parts = common::MinMaxPartitions(
          rows, row_bytes, partitioner.min_slice_bytes(),
          partitioner.max_partitions() > 0 ? partitioner.max_partitions() : 4 * num_ps);
    } else if (partitioner.kind() == "axis_size") {
      parts = common::AxisSizePartitions(rows, row_bytes, partitioner.max_shard_bytes());
    } else if (!partitioner.kind().empty() && partitioner.kind() != "none") {
      return absl::InvalidArgumentError(absl::StrCat("unknown partitioner '", partitioner.kind(),
                                                     "' (known: none, fixed, min_max, axis_size)"));
    }
    if (!parts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("partitioning '", var.spec.name(), "': ", parts.status().message()));
    }
    absl::StatusOr<std::vector<proto::VariableSpec>> split =
        common::SplitVariable(var.spec, *parts, routing);
    if (!split.ok()) return split.status();
    specs.insert(specs.end(), split->begin(), split->end());
  }
  absl::StatusOr<proto::PlacementPlan> plan;
  if (training.placement() == "round_robin") {
    plan = common::PlaceRoundRobin(specs, num_ps);
  } else if (training.placement().empty() || training.placement() == "size_balanced") {
    plan = common::PlaceSizeBalanced(specs, num_ps, kHashRowGuess);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown placement '", training.placement(),
                                                   "' (known: round_robin, size_balanced)"));
  }
  if (!plan.ok()) return plan.status();
  plan->mutable_dense()->Assign(dense.begin(), dense.end());
  plan->mutable_tables()->Assign(tables.begin(), tables.end());
  if (absl::Status replicated =
          common::ReplicateShards(training.ps_replicas() > 0 ? training.ps_replicas() : 1, &*plan);
      !replicated.ok()) {
    return replicated;
  }
  return plan;
}

absl::Status CheckPlanMatches(const proto::PlacementPlan& plan,
                              const std::vector<ModelVariable>& variables) {
  // Whole variables by name, and partitioned ones by logical name (a dense
  // variable cut into pieces is checked by its full shape).
  absl::flat_hash_map<std::string, const proto::VariableSpec*> whole;
  absl::flat_hash_set<std::string> tables;
  for (const auto& entry : plan.variables()) {
    if (entry.spec().variable().empty()) {
      whole[entry.spec().name()] = &entry.spec();
    } else {
      tables.insert(entry.spec().variable());
      if (entry.spec().routing() == proto::DIV) {
        whole.emplace(entry.spec().variable(), &entry.spec());
      }
    }
  }
  for (const ModelVariable& var : variables) {
    const proto::VariableSpec& spec = var.spec;
    if (var.table) {
      if (!tables.contains(spec.name())) {
        return absl::FailedPreconditionError(absl::StrCat("the placement plan has no table '",
                                                          spec.name(), "' that the model needs"));
      }
      continue;
    }
    auto it = whole.find(spec.name());
    if (it == whole.end()) {
      return absl::FailedPreconditionError(absl::StrCat("the placement plan has no variable '",
                                                        spec.name(), "' that the model needs"));
    }
    const auto& got = it->second->variable().empty() ? it->second->shape()
                                                     : it->second->full_shape();
    if (!std::equal(got.begin(), got.end(), spec.shape().begin(), spec.shape().end())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "variable '", spec.name(), "' has shape ", common::ShapeString(got),
          " in the placement plan but the model needs ", common::ShapeString(spec.shape())));
    }
  }
  return absl::OkStatus();
}

}  // namespace pst::models
