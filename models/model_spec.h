// The bridge between a TrainingConfig and the variables a model needs: the
// chief uses it to build the placement plan, workers to check the plan they
// receive matches the model they will compute, and `pstrain plan` to show it.
#ifndef PST_MODELS_MODEL_SPEC_H_
#define PST_MODELS_MODEL_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/mlp.h"
#include "models/wide_deep.h"
#include "proto/pstrain.pb.h"

namespace pst::worker {

inline constexpr int kFashionMnistDim = 784;
inline constexpr int kFashionMnistClasses = 10;

// Embedding tables of the wide & deep model.
inline constexpr char kDeepEmbedding[] = "deep/embedding";
inline constexpr char kWideEmbedding[] = "wide/embedding";

struct ModelVariable {
  proto::VariableSpec spec;  // the whole, logical variable
  bool table = false;        // read and updated by rows; partitioned
};

// The MLP shape a config asks for. InvalidArgument for another model.
absl::StatusOr<MlpConfig> MlpConfigFor(const proto::TrainingConfig& training);
absl::StatusOr<WideDeepConfig> WideDeepConfigFor(const proto::TrainingConfig& training);

// The model's variables in creation order, with their initializers: dense
// kernels Glorot-uniform (seeded from training.seed and their position),
// biases zeros, deep embeddings U(-0.05, 0.05), wide embeddings zeros. A
// hash embedding (buckets_per_field == 0) has shape [0, dim].
absl::StatusOr<std::vector<ModelVariable>> ModelVariables(const proto::TrainingConfig& training);

// Names of the variables that are not tables, in creation order.
std::vector<std::string> DenseNames(const std::vector<ModelVariable>& variables);

// Splits the tables with the configured partitioner and routing, then
// places every variable or partition with the configured policy.
// Errors: InvalidArgument for a bad partitioner or policy.
absl::StatusOr<proto::PlacementPlan> BuildPlan(const proto::TrainingConfig& training, int num_ps);

// Checks that `plan` holds every dense variable of the model with the same
// shape, and every table. FailedPrecondition names the first mismatch.
absl::Status CheckPlanMatches(const proto::PlacementPlan& plan,
                              const std::vector<ModelVariable>& variables);

}  // namespace pst::worker

#endif  // PST_MODELS_MODEL_SPEC_H_
