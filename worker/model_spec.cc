#include "worker/model_spec.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_util.h"

namespace pst::worker {

absl::StatusOr<MlpConfig> MlpConfigFor(const proto::TrainingConfig& training) {
  if (training.model() != "mlp") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model '", training.model(), "' (known: mlp)"));
  }
  MlpConfig config;
  config.input_dim = kFashionMnistDim;
  config.num_classes = kFashionMnistClasses;
  config.hidden.assign(training.hidden_units().begin(), training.hidden_units().end());
  for (int units : config.hidden) {
    if (units < 1) return absl::InvalidArgumentError("hidden layer widths must be positive");
  }
  return config;
}

absl::StatusOr<std::vector<proto::VariableSpec>> ModelVariables(
    const proto::TrainingConfig& training) {
  absl::StatusOr<MlpConfig> mlp = MlpConfigFor(training);
  if (!mlp.ok()) return mlp.status();
  std::vector<proto::VariableSpec> specs;
  const std::vector<ParamSpec> params = MlpParamSpecs(*mlp);
  for (size_t i = 0; i < params.size(); ++i) {
    proto::VariableSpec spec;
    spec.set_name(params[i].name);
    spec.set_dtype(proto::DT_FLOAT32);
    for (int64_t d : params[i].shape) spec.add_shape(d);
    proto::Initializer* init = spec.mutable_initializer();
    if (params[i].is_kernel) {
      init->set_kind(proto::Initializer::GLOROT_UNIFORM);
      init->set_seed(training.seed() * 1000003u + i);
    } else {
      init->set_kind(proto::Initializer::ZEROS);
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

absl::Status CheckPlanMatches(const proto::PlacementPlan& plan,
                              const std::vector<proto::VariableSpec>& specs) {
  absl::flat_hash_map<std::string, const proto::VariableSpec*> planned;
  for (const auto& entry : plan.variables()) planned[entry.spec().name()] = &entry.spec();
  for (const proto::VariableSpec& spec : specs) {
    auto it = planned.find(spec.name());
    if (it == planned.end()) {
      return absl::FailedPreconditionError(absl::StrCat("the placement plan has no variable '",
                                                        spec.name(), "' that the model needs"));
    }
    const auto& got = it->second->shape();
    if (!std::equal(got.begin(), got.end(), spec.shape().begin(), spec.shape().end())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "variable '", spec.name(), "' has shape ", common::ShapeString(got),
          " in the placement plan but the model needs ", common::ShapeString(spec.shape())));
    }
  }
  return absl::OkStatus();
}

}  // namespace pst::worker
