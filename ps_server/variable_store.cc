#include "ps_server/variable_store.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "google/protobuf/util/message_differencer.h"

namespace pst::ps {

using google::protobuf::util::MessageDifferencer;

VariableStore::VariableStore(Options options) : options_(options) {}

absl::StatusOr<int> VariableStore::Create(const proto::CreateVariablesRequest& request) {
  PST_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, CreateOptimizer(request.optimizer()));

  absl::MutexLock lock(&mu_);
  if (optimizer_ != nullptr &&
      !MessageDifferencer::Equals(optimizer_config_, request.optimizer())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this ps already runs optimizer '", optimizer_config_.name(), "' (learning_rate ",
        optimizer_config_.learning_rate(), "); it cannot change to '", request.optimizer().name(),
        "' (learning_rate ", request.optimizer().learning_rate(), ")"));
  }
  // Check everything before creating anything.
  absl::flat_hash_set<std::string_view> seen;
  std::vector<const proto::VariableSpec*> to_create;
  for (const proto::VariableSpec& spec : request.variables()) {
    PST_RETURN_IF_ERROR(common::ValidateVariableSpec(spec, options_.max_variable_elements));
    PST_RETURN_IF_ERROR(common::ValidateInitializer(spec));
    if (!seen.insert(spec.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", spec.name(), "' appears twice in one request"));
    }
    auto it = variables_.find(spec.name());
    if (it == variables_.end()) {
      to_create.push_back(&spec);
    } else if (!MessageDifferencer::Equals(it->second->spec, spec)) {
      return absl::AlreadyExistsError(
          absl::StrCat("variable '", spec.name(), "' already exists with shape ",
                       common::ShapeString(it->second->spec.shape()),
                       " and another spec; asked for shape ", common::ShapeString(spec.shape())));
    }
  }
  // Allocate and initialize outside the map, then publish all at once.
  std::vector<std::unique_ptr<Variable>> created;
  for (const proto::VariableSpec* spec : to_create) {
    auto var = std::make_unique<Variable>(*spec);
    const int64_t n = *common::NumElements(spec->shape());
    absl::MutexLock var_lock(&var->mu);
    var->values.resize(n);
    common::FillInitialValues(*spec, 0, var->values);
    var->slots.assign(optimizer->num_slots(), std::vector<float>(n, 0.0f));
    created.push_back(std::move(var));
  }
  for (auto& var : created) {
    std::string name = var->spec.name();
    variables_.emplace(std::move(name), std::move(var));
  }
  if (optimizer_ == nullptr) {
    optimizer_ = std::move(optimizer);
    optimizer_config_ = request.optimizer();
  }
  return static_cast<int>(created.size());
}

absl::StatusOr<VariableStore::Variable*> VariableStore::Find(const std::string& name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("no variable named '", name, "' on this ps"));
  }
  return it->second.get();
}

absl::Status VariableStore::Pull(const google::protobuf::RepeatedPtrField<std::string>& names,
                                 proto::PullResponse* response) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const Variable*> vars;
  if (names.empty()) {
    for (const auto& [name, var] : variables_) vars.push_back(var.get());
    std::sort(vars.begin(), vars.end(),
              [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  } else {
    for (const std::string& name : names) {
      PST_ASSIGN_OR_RETURN(const Variable* var, Find(name));
      vars.push_back(var);
    }
  }
  response->Clear();
  for (const Variable* var : vars) {
    absl::ReaderMutexLock var_lock(&var->mu);
    response->add_names(var->spec.name());
    common::PackFloats(var->values, var->spec.shape(), response->add_values());
    response->add_versions(var->version);
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Push(const proto::PushRequest& request, proto::PushResponse* response) {
  if (request.names_size() != request.gradients_size()) {
    return absl::InvalidArgumentError(absl::StrCat("push has ", request.names_size(), " names but ",
                                                   request.gradients_size(), " gradients"));
  }
  absl::ReaderMutexLock lock(&mu_);
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("no variables have been created on this ps yet");
  }
  // Validate every gradient before touching any variable.
  absl::flat_hash_set<std::string_view> seen;
  std::vector<Variable*> vars;
  std::vector<std::vector<float>> grads(request.names_size());
  for (int i = 0; i < request.names_size(); ++i) {
    const std::string& name = request.names(i);
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' appears twice in one push"));
    }
    PST_ASSIGN_OR_RETURN(Variable * var, Find(name));
    PST_RETURN_IF_ERROR(common::CheckTensorMatches(request.gradients(i), var->spec.shape(),
                                                   absl::StrCat("gradient for '", name, "'")));
    grads[i].resize(request.gradients(i).data().size() / sizeof(float));
    common::UnpackFloats(request.gradients(i), grads[i]);
    for (size_t k = 0; k < grads[i].size(); ++k) {
      if (!std::isfinite(grads[i][k])) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for '", name, "' has a ",
                                                       std::isnan(grads[i][k]) ? "NaN" : "Inf",
                                                       " at element ", k, "; nothing applied"));
      }
    }
    vars.push_back(var);
  }
  response->Clear();
  for (size_t i = 0; i < vars.size(); ++i) {
    Variable* var = vars[i];
    absl::MutexLock var_lock(&var->mu);
    std::vector<std::span<float>> slots(var->slots.begin(), var->slots.end());
    optimizer_->ApplyDense(var->values, grads[i], slots, var->version + 1);
    response->add_versions(++var->version);
  }
  pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

VariableStore::Stats VariableStore::GetStats() const {
  absl::ReaderMutexLock lock(&mu_);
  Stats stats;
  stats.num_variables = static_cast<int>(variables_.size());
  for (const auto& [name, var] : variables_) {
    stats.num_elements += *common::NumElements(var->spec.shape());
  }
  stats.pushes_applied = pushes_applied_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace pst::ps
