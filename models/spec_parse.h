// What the model spec's parsers share (models/spec_model.cc, the variables;
// models/spec_training.cc, the training settings): how an error names the
// file and the variable, and the check for unknown keys. Internal to
// models/.
#ifndef PST_MODELS_SPEC_PARSE_H_
#define PST_MODELS_SPEC_PARSE_H_

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::models {

// Error messages name the file, then the variable.
class SpecContext {
 public:
  explicit SpecContext(const std::string& path) : path_(path) {}
  void SetVariable(int index, const std::string& name) {
    variable_ =
        name.empty() ? absl::StrCat("variable #", index) : absl::StrCat("variable '", name, "'");
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec ", path_, ": ", variable_.empty() ? "" : variable_ + ": ", what));
  }

 private:
  const std::string& path_;
  std::string variable_;
};

// OK, or an error naming the first key of `object` not in `keys` (`what`
// is where: "the spec", "'init'").
absl::Status OnlyKeys(const nlohmann::json& object, std::initializer_list<absl::string_view> keys,
                      const SpecContext& context, absl::string_view what);

// The spec's training settings: "optimizer" (an OptimizerConfig in
// protobuf's JSON form, its "schedule" an LrSchedule object or
// --lr_schedule's text), "optimizer_groups" ([{"match": [...],
// "optimizer": {...}}]) and "clip_norm", into `training` (cleared first).
// They are checked in full with the flags (flags/optimizer_flags.h,
// common::CheckOptimizerGroups), which may still set the rate. Errors:
// InvalidArgument naming the file and the field.
absl::Status ParseSpecTraining(const nlohmann::json& spec, const SpecContext& context,
                               proto::TrainingConfig* training);

}  // namespace pst::models

#endif  // PST_MODELS_SPEC_PARSE_H_
