// The registry: the one place that maps --model names to models. Nothing
// else compares a model's name to a string.
#ifndef PST_MODELS_REGISTRY_H_
#define PST_MODELS_REGISTRY_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

// The model named `name`, or InvalidArgument listing the known ones.
absl::StatusOr<const Model*> FindModel(std::string_view name);
// The model of training.model().
absl::StatusOr<const Model*> ModelFor(const proto::TrainingConfig& training);
// Every model's name, in registry order.
std::vector<std::string> ModelNames();

}  // namespace pst::models

#endif  // PST_MODELS_REGISTRY_H_
