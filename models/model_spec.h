// The bridge between a TrainingConfig and the variables its model needs
// (found through the registry): the chief uses it to build the placement
// plan, workers to check the plan they receive matches the model they will
// compute, and `pstrain plan` to show it.
#ifndef PST_MODELS_MODEL_SPEC_H_
#define PST_MODELS_MODEL_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/optimizer_groups.h"
#include "models/mlp.h"
#include "models/model.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

// The variables of training.model(), in creation order, with their
// initializers; a hash embedding that sets no capacity or eviction of its
// own takes the job's (table_capacity, table_eviction). Errors:
// InvalidArgument for an unknown model or a setting out of range.
absl::StatusOr<std::vector<ModelVariable>> ModelVariables(const proto::TrainingConfig& training);

// Dense variables from a model's parameter specs: kernels Glorot-uniform
// (kernel i seeded from seed * 1000003 + i), biases zeros.
std::vector<ModelVariable> DenseVariables(const std::vector<ParamSpec>& params, uint64_t seed);

// Names of the variables that are not tables, in creation order.
std::vector<std::string> DenseNames(const std::vector<ModelVariable>& variables);

// The variables as optimizer groups see them (name, table or not).
std::vector<common::GroupedVariable> GroupedVariables(const std::vector<ModelVariable>& variables);

// Splits the tables with the configured partitioner and routing, then
// places every variable or partition with the configured policy; every
// entry's spec carries its variable's optimizer (common::OptimizerOf).
// Errors: InvalidArgument for a bad partitioner or policy, or optimizer
// groups common::CheckOptimizerGroups refuses.
absl::StatusOr<proto::PlacementPlan> BuildPlan(const proto::TrainingConfig& training, int num_ps);

// Checks that `plan` holds every dense variable of the model with the same
// shape, and every table. FailedPrecondition names the first mismatch.
absl::Status CheckPlanMatches(const proto::PlacementPlan& plan,
                              const std::vector<ModelVariable>& variables);

}  // namespace pst::models

#endif  // PST_MODELS_MODEL_SPEC_H_
