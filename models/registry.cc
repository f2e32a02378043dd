#include "models/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pst::models {

// Each defined in its model's file (models/<name>_model.cc).
const Model& MlpModel();
const Model& WideDeepModel();
const Model& LogregModel();
const Model& SpecModel();

namespace {

// One line per model.
const Model* const kModels[] = {
    &MlpModel(),
    &WideDeepModel(),
    &LogregModel(),
    &SpecModel(),
};

}  // namespace

absl::StatusOr<const Model*> FindModel(std::string_view name) {
  for (const Model* model : kModels) {
    if (!model->names_file() ? model->name() == name
                             : name.size() > model->name().size() &&
                                   name.substr(0, model->name().size()) == model->name() &&
                                   name[model->name().size()] == ':') {
      return model;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", std::string(name),
                   "' is not a known model (known: ", absl::StrJoin(ModelNames(), ", "), ")"));
}

absl::StatusOr<const Model*> ModelFor(const proto::TrainingConfig& training) {
  return FindModel(training.model());
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const Model* model : kModels) {
    names.push_back(std::string(model->name()) + (model->names_file() ? ":FILE" : ""));
  }
  return names;
}

}  // namespace pst::models
