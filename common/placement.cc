#include "common/placement.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_util.h"

namespace pst::common {

absl::StatusOr<proto::PlacementPlan> PlaceRoundRobin(
    const std::vector<proto::VariableSpec>& variables, int num_ps) {
  if (num_ps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement needs at least one ps, got ", num_ps));
  }
  absl::flat_hash_set<std::string_view> names;
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  plan.set_policy("round_robin");
  for (size_t i = 0; i < variables.size(); ++i) {
    if (!names.insert(variables[i].name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable name '", variables[i].name(), "' is used twice"));
    }
    proto::PlacementPlan::Entry* entry = plan.add_variables();
    *entry->mutable_spec() = variables[i];
    entry->set_ps_index(static_cast<int>(i % num_ps));
  }
  return plan;
}

std::vector<int64_t> BytesPerPs(const proto::PlacementPlan& plan) {
  std::vector<int64_t> bytes(plan.num_ps(), 0);
  for (const auto& entry : plan.variables()) {
    absl::StatusOr<int64_t> n = NumElements(entry.spec().shape());
    if (n.ok() && entry.ps_index() >= 0 && entry.ps_index() < plan.num_ps()) {
      bytes[entry.ps_index()] += *n * static_cast<int64_t>(sizeof(float));
    }
  }
  return bytes;
}

}  // namespace pst::common
