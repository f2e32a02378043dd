#include "common/optimizer_groups.h"

#include <fnmatch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/optimizer_config.h"

namespace pst::common {
namespace {

std::string GroupName(const proto::TrainingConfig& training, int g) {
  return absl::StrCat("optimizer group ", g, " (",
                      absl::StrJoin(training.optimizer_groups(g).match(), ", "), ")");
}

}  // namespace

bool GroupMatches(absl::string_view pattern, const GroupedVariable& variable) {
  if (pattern == "tables") return variable.table;
  if (pattern == "dense") return !variable.table;
  return fnmatch(std::string(pattern).c_str(), variable.name.c_str(), 0) == 0;
}

const proto::OptimizerConfig& OptimizerOf(const proto::TrainingConfig& training,
                                          const GroupedVariable& variable) {
  for (const proto::OptimizerGroup& group : training.optimizer_groups()) {
    for (const std::string& pattern : group.match()) {
      if (GroupMatches(pattern, variable)) return group.optimizer();
    }
  }
  return training.optimizer();
}

absl::Status CheckOptimizerGroups(const proto::TrainingConfig& training,
                                  const std::vector<GroupedVariable>& variables) {
  std::vector<int> group_of(variables.size(), -1);
  for (int g = 0; g < training.optimizer_groups_size(); ++g) {
    const proto::OptimizerGroup& group = training.optimizer_groups(g);
    if (group.match().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(GroupName(training, g),
                                                     " names no variables: give it \"tables\", "
                                                     "\"dense\" or name patterns"));
    }
    if (absl::Status s = CheckOptimizerConfig(group.optimizer()).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(GroupName(training, g), ": ", s.message()));
    }
    for (const std::string& pattern : group.match()) {
      bool any = false;
      for (size_t v = 0; v < variables.size(); ++v) {
        if (!GroupMatches(pattern, variables[v])) continue;
        any = true;
        if (group_of[v] >= 0 && group_of[v] != g) {
          return absl::InvalidArgumentError(absl::StrCat(
              "variable '", variables[v].name, "' is in ", GroupName(training, group_of[v]),
              " and in ", GroupName(training, g), ": a variable has one optimizer"));
        }
        group_of[v] = g;
      }
      if (!any) {
        return absl::InvalidArgumentError(absl::StrCat(GroupName(training, g), ": '", pattern,
                                                       "' matches no variable of the model"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pst::common
