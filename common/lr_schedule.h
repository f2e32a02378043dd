// Learning-rate schedules (proto::LrSchedule): the rate as a function of
// the step, computed where it is used (each ps, per update) and where it is
// shown (the chief's progress line, /metrics, TensorBoard), by this one
// function, so they agree and a restored job resumes its schedule.
//
// The step is the number of updates a variable took before this one: its
// version. The schedule counts in units of `every` steps (torch's epochs:
// pstrain.torch sets every = steps per epoch), unit = floor(step / every):
//
//   warm-up   unit < warmup: lr * (warmup_start + (1 - warmup_start) * unit / warmup)
//   then, at u = unit - warmup:
//   constant    lr
//   step        lr * gamma^floor(u / step_size)               (torch StepLR)
//   multistep   lr * gamma^(milestones <= u)                  (torch MultiStepLR)
//   exponential lr * gamma^u                                  (torch ExponentialLR)
//   cosine      min_lr + (lr - min_lr) * (1 + cos(pi * min(u, decay_units) / decay_units)) / 2
//               (torch CosineAnnealingLR up to T_max; then it stays at min_lr, as
//               TF's CosineDecay)
//   polynomial  (lr - min_lr) * (1 - min(u, decay_units) / decay_units)^power + min_lr
//               (TF PolynomialDecay; torch PolynomialLR with min_lr 0)
//   piecewise   values[i], i = the boundaries u is above (TF PiecewiseConstantDecay)
//
// Thread-safety: pure functions.
#ifndef PST_COMMON_LR_SCHEDULE_H_
#define PST_COMMON_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// OK, or InvalidArgument naming the first bad field: an unknown kind, a
// negative every or warmup, warmup_start outside [0, 1], a step_size or
// decay_units below 1, a gamma that is not positive and finite, milestones
// or boundaries that decrease, values that are not one more than the
// boundaries or not positive, a negative min_lr or power.
absl::Status CheckLrSchedule(const proto::LrSchedule& schedule);

// The rate of the update that comes after `step` updates, for base rate
// `lr`. REQUIRES: CheckLrSchedule(schedule).ok(), step >= 0.
double LearningRateAt(double lr, const proto::LrSchedule& schedule, int64_t step);

// The rate of the update after `step` updates of a variable trained by
// `optimizer`: its learning rate (the decimal it was written as,
// common/decimal.h) scaled by its schedule. What the ps applies and the
// chief shows.
double ScheduledRate(const proto::OptimizerConfig& optimizer, int64_t step);

// Whether the rate changes with the step (a kind other than constant, or a
// warm-up).
bool IsScheduled(const proto::LrSchedule& schedule);

// The --lr_schedule flag: comma-separated `key:value` items, for example
// "warmup:500,cosine:10000,min:1e-5" or "step:3,gamma:0.7,every:469".
//   kinds:  constant | step:<units> | multistep:<u>/<u>/... |
//           exponential:<gamma> | cosine:<units> | polynomial:<units> |
//           piecewise:<u>/<u>/...
//   others: gamma:<f> (step, multistep, exponential), min:<rate> (cosine,
//           polynomial), power:<f> (polynomial), values:<rate>/<rate>/...
//           (piecewise), warmup:<units>, warmup_start:<f>, every:<steps>
// Empty text is the constant schedule. InvalidArgument naming the item for
// an unknown key, a bad number, a key the kind does not take, a repeated
// key, or what CheckLrSchedule refuses.
absl::StatusOr<proto::LrSchedule> ParseLrSchedule(absl::string_view text);

// The schedule in ParseLrSchedule's syntax ("constant" for the default).
std::string LrScheduleString(const proto::LrSchedule& schedule);

}  // namespace pst::common

#endif  // PST_COMMON_LR_SCHEDULE_H_
