// An optimizer per group of variables (TrainingConfig.optimizer_groups):
// the standard CTR recipe runs Adagrad or FTRL on the embedding tables and
// Adam on the dense layers, as TensorFlow's separate sparse optimizer and
// torch's param groups do. A group names its variables by their logical
// names: "tables", "dense", or glob patterns. A variable in no group takes
// the job's optimizer. The chief resolves each variable's optimizer once,
// into its VariableSpec (models::BuildPlan), so the ps and every
// checkpoint carry it.
//
// Thread-safety: pure functions.
#ifndef PST_COMMON_OPTIMIZER_GROUPS_H_
#define PST_COMMON_OPTIMIZER_GROUPS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// A variable as the groups see it: its logical name, and whether it is
// read by rows (a table or a hash embedding).
struct GroupedVariable {
  std::string name;
  bool table = false;
};

// Whether `pattern` ("tables", "dense" or a glob) matches `variable`.
bool GroupMatches(absl::string_view pattern, const GroupedVariable& variable);

// The optimizer `variable` trains with: its group's, or training.optimizer().
const proto::OptimizerConfig& OptimizerOf(const proto::TrainingConfig& training,
                                          const GroupedVariable& variable);

// OK, or InvalidArgument naming the group (by its position and patterns):
// a group without patterns or whose optimizer CheckOptimizerConfig refuses,
// a pattern that matches none of `variables`, or a variable that two
// groups match (it would have two optimizers).
absl::Status CheckOptimizerGroups(const proto::TrainingConfig& training,
                                  const std::vector<GroupedVariable>& variables);

}  // namespace pst::common

#endif  // PST_COMMON_OPTIMIZER_GROUPS_H_
