// The single-process reference: trains a model with one worker loop and the
// ps as in-process VariableStores, using the same plan, initial values,
// optimizer, partitioning and training loop as the cluster. What a cluster
// run reaches can then be compared with what the same model reaches in one
// process on the same data.
#ifndef PST_TOOLS_REFERENCE_H_
#define PST_TOOLS_REFERENCE_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::tools {

// Returns the same metrics the chief's summary holds (test_auc/test_logloss
// for wide_deep, test_accuracy/test_loss for mlp), plus global_step and
// train_seconds. `data_dir` is Fashion-MNIST's, for the mlp.
absl::StatusOr<nlohmann::json> TrainReference(const proto::TrainingConfig& training, int num_ps,
                                              const std::string& data_dir);

// Prints the placement plan: each variable or partition with its shape,
// bytes and ps, then bytes per ps and the imbalance (most-loaded ps over
// the mean).
std::string FormatPlan(const proto::PlacementPlan& plan);

// Max over mean of bytes per ps (1.0 is perfect balance).
double Imbalance(const proto::PlacementPlan& plan);

}  // namespace pst::tools

#endif  // PST_TOOLS_REFERENCE_H_
