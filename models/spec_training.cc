// The model spec's training settings: its optimizer, optimizer groups and
// clip_norm (models/spec_parse.h).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "models/spec_parse.h"

namespace pst::models {
namespace {

using nlohmann::json;

// An OptimizerConfig in protobuf's JSON form, its "schedule" an LrSchedule
// object or --lr_schedule's text, as field `what`.
absl::Status ParseOptimizer(const json& value, const SpecContext& context, const std::string& what,
                            proto::OptimizerConfig* out) {
  if (!value.is_object())
    return context.Error(absl::StrCat("field '", what, "' must be an object"));
  json fields = value;
  proto::LrSchedule schedule;
  if (auto text = fields.find("schedule"); text != fields.end() && text->is_string()) {
    absl::StatusOr<proto::LrSchedule> parsed = common::ParseLrSchedule(text->get<std::string>());
    if (!parsed.ok()) return context.Error(absl::StrCat(what, ": ", parsed.status().message()));
    schedule = *std::move(parsed);
    fields.erase("schedule");
  }
  const auto parsed = google::protobuf::util::JsonStringToMessage(fields.dump(), out);
  if (!parsed.ok()) {
    return context.Error(absl::StrCat("field '", what, "': ", parsed.message().as_string()));
  }
  if (!out->has_schedule()) *out->mutable_schedule() = std::move(schedule);
  if (absl::Status s = common::CheckLrSchedule(out->schedule()); !s.ok()) {
    return context.Error(absl::StrCat(what, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseSpecTraining(const json& spec, const SpecContext& context,
                               proto::TrainingConfig* training) {
  training->clear_optimizer();
  training->clear_optimizer_groups();
  training->clear_clip_norm();
  if (auto optimizer = spec.find("optimizer"); optimizer != spec.end()) {
    PST_RETURN_IF_ERROR(
        ParseOptimizer(*optimizer, context, "optimizer", training->mutable_optimizer()));
  }
  if (auto groups = spec.find("optimizer_groups"); groups != spec.end()) {
    if (!groups->is_array()) return context.Error("field 'optimizer_groups' must be an array");
    for (size_t g = 0; g < groups->size(); ++g) {
      const json& entry = (*groups)[g];
      const std::string what = absl::StrCat("optimizer_groups[", g, "]");
      if (!entry.is_object()) return context.Error(absl::StrCat(what, " must be an object"));
      PST_RETURN_IF_ERROR(OnlyKeys(entry, {"match", "optimizer"}, context, what));
      proto::OptimizerGroup* group = training->add_optimizer_groups();
      auto match = entry.find("match");
      if (match == entry.end() || !match->is_array() || match->empty()) {
        return context.Error(absl::StrCat(what, ".match must be a non-empty array of patterns"));
      }
      for (const json& pattern : *match) {
        if (!pattern.is_string()) {
          return context.Error(absl::StrCat(what, ".match holds a non-string"));
        }
        group->add_match(pattern.get<std::string>());
      }
      auto optimizer = entry.find("optimizer");
      if (optimizer == entry.end()) {
        return context.Error(absl::StrCat(what, ".optimizer is missing"));
      }
      PST_RETURN_IF_ERROR(
          ParseOptimizer(*optimizer, context, what + ".optimizer", group->mutable_optimizer()));
    }
  }
  if (auto clip = spec.find("clip_norm"); clip != spec.end()) {
    if (!clip->is_number() || !std::isfinite(clip->get<double>()) || clip->get<double>() < 0) {
      return context.Error("field 'clip_norm' must be a number >= 0");
    }
    training->set_clip_norm(clip->get<float>());
  }
  return absl::OkStatus();
}

}  // namespace pst::models
