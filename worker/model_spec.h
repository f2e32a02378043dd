// The bridge between a TrainingConfig and the variables a model needs: the
// chief uses it to build the placement plan, workers to check the plan they
// receive matches the model they will compute.
#ifndef PST_WORKER_MODEL_SPEC_H_
#define PST_WORKER_MODEL_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"
#include "worker/mlp.h"

namespace pst::worker {

inline constexpr int kFashionMnistDim = 784;
inline constexpr int kFashionMnistClasses = 10;

// The MLP shape a config asks for. InvalidArgument for an unknown model.
absl::StatusOr<MlpConfig> MlpConfigFor(const proto::TrainingConfig& training);

// The model's variables in creation order, with their initializers: kernels
// Glorot-uniform (seeded from training.seed and the variable's position),
// biases zeros.
absl::StatusOr<std::vector<proto::VariableSpec>> ModelVariables(
    const proto::TrainingConfig& training);

// Checks that `plan` holds every variable in `specs` with the same shape.
// FailedPrecondition names the first mismatch.
absl::Status CheckPlanMatches(const proto::PlacementPlan& plan,
                              const std::vector<proto::VariableSpec>& specs);

}  // namespace pst::worker

#endif  // PST_WORKER_MODEL_SPEC_H_
