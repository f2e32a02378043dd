// OptimizerFromFlags: the job's optimizer, from the optimizer flags or from
// a model spec's "optimizer" (pstrain.torch.export_spec writes one from a
// torch.optim optimizer and scheduler), checked by the ps's own rules.
#include "flags/optimizer_flags.h"

#include <cmath>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/optimizer_config.h"
#include "flags/job_flags.h"
#include "models/model.h"

namespace pst::flags {
namespace {

// Every hyperparameter flag, over what *opt holds.
void HyperparametersFromFlags(proto::OptimizerConfig* opt) {
  opt->set_form(absl::GetFlag(FLAGS_optimizer_form));
  double momentum = absl::GetFlag(FLAGS_momentum);
  if (momentum == -1) momentum = opt->name() == "momentum" ? 0.9 : 0.0;
  opt->set_momentum(static_cast<float>(momentum));
  opt->set_nesterov(absl::GetFlag(FLAGS_nesterov));
  opt->set_beta1(static_cast<float>(absl::GetFlag(FLAGS_beta1)));
  opt->set_beta2(static_cast<float>(absl::GetFlag(FLAGS_beta2)));
  opt->set_epsilon(static_cast<float>(absl::GetFlag(FLAGS_epsilon)));
  opt->set_initial_accumulator(static_cast<float>(absl::GetFlag(FLAGS_initial_accumulator)));
  opt->set_l1(static_cast<float>(absl::GetFlag(FLAGS_l1)));
  opt->set_l2(static_cast<float>(absl::GetFlag(FLAGS_l2)));
  opt->set_lr_power(static_cast<float>(absl::GetFlag(FLAGS_lr_power)));
  opt->set_weight_decay(static_cast<float>(absl::GetFlag(FLAGS_weight_decay)));
  opt->set_rho(static_cast<float>(absl::GetFlag(FLAGS_rho)));
  opt->set_centered(absl::GetFlag(FLAGS_centered));
  opt->set_lr_decay(static_cast<float>(absl::GetFlag(FLAGS_lr_decay)));
}

}  // namespace

absl::Status OptimizerFromFlags(const models::Model& model, proto::TrainingConfig* config) {
  // A spec's optimizer (ReadFiles put it there) stands unless --optimizer
  // names another; the flags of the rate, its schedule and the clipping
  // still apply to it when given.
  const bool from_spec = config->has_optimizer() && absl::GetFlag(FLAGS_optimizer).empty();
  proto::OptimizerConfig* opt = config->mutable_optimizer();
  if (!from_spec) {
    opt->Clear();
    // Empty or 0: the model's own choice.
    opt->set_name(absl::GetFlag(FLAGS_optimizer));
    if (opt->name().empty()) opt->set_name(std::string(model.default_optimizer()));
    opt->set_learning_rate(static_cast<float>(model.default_learning_rate()));
    HyperparametersFromFlags(opt);
  }
  if (const double lr = absl::GetFlag(FLAGS_learning_rate); lr != 0) {
    opt->set_learning_rate(static_cast<float>(lr));
  }
  if (absl::GetFlag(FLAGS_skip_nonfinite)) opt->set_skip_nonfinite(true);
  if (const double clip = absl::GetFlag(FLAGS_clip_value); clip != 0) {
    opt->set_clip_value(static_cast<float>(clip));
  }
  if (const std::string text = absl::GetFlag(FLAGS_lr_schedule); !text.empty()) {
    absl::StatusOr<proto::LrSchedule> schedule = common::ParseLrSchedule(text);
    if (!schedule.ok()) {
      // "--" + "lr_schedule: <what>".
      return absl::InvalidArgumentError(absl::StrCat("--", schedule.status().message()));
    }
    *opt->mutable_schedule() = *std::move(schedule);
  }
  // --table_optimizer: a group of the tables, with the same flags.
  if (const std::string table = absl::GetFlag(FLAGS_table_optimizer); !table.empty()) {
    config->clear_optimizer_groups();
    proto::OptimizerGroup* group = config->add_optimizer_groups();
    group->add_match("tables");
    proto::OptimizerConfig* t = group->mutable_optimizer();
    *t = *opt;
    t->set_name(table);
    HyperparametersFromFlags(t);
    const double table_lr = absl::GetFlag(FLAGS_table_learning_rate);
    if (table_lr != 0) t->set_learning_rate(static_cast<float>(table_lr));
    if (absl::Status s = common::CheckOptimizerConfig(*t).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--table_optimizer: ", s.message()));
    }
  }
  const double clip_norm = absl::GetFlag(FLAGS_clip_norm);
  if (!std::isfinite(clip_norm) || clip_norm < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--clip_norm must be >= 0 and finite (0: off), got ", clip_norm));
  }
  if (clip_norm != 0) config->set_clip_norm(static_cast<float>(clip_norm));
  // The ps's own check, so a bad hyperparameter fails before anything starts.
  if (absl::Status s = common::CheckOptimizerConfig(*opt).status(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(from_spec ? absl::StrCat("the optimizer of ", config->model(), ": ")
                               : std::string("optimizer flags: "),
                     s.message()));
  }
  return absl::OkStatus();
}

}  // namespace pst::flags
