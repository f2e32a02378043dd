#include "chief/step_advice.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "models/registry.h"

namespace pst::chief {
namespace {

// At or above: a step mostly waits on the ps. Below kComputeBound: it
// mostly computes.
constexpr double kCommunicationBound = 0.5;
constexpr double kComputeBound = 0.2;

double PerStepMs(double seconds, int64_t steps) {
  return steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0;
}

}  // namespace

StepAdvice AdviseOnSteps(const std::vector<proto::StepTimes>& times,
                         const proto::TrainingConfig& training) {
  StepAdvice a;
  for (size_t w = 0; w < times.size(); ++w) {
    const proto::StepTimes& t = times[w];
    if (t.steps() <= 0) continue;
    const double step_ms = PerStepMs(t.compute_seconds() + t.exposed_seconds(), t.steps());
    if (a.worker >= 0 && step_ms <= a.step_ms) continue;
    a.worker = static_cast<int>(w);
    a.step_ms = step_ms;
    a.compute_ms = PerStepMs(t.compute_seconds(), t.steps());
    a.communication_ms = PerStepMs(t.communication_seconds(), t.steps());
    a.exposed_ms = PerStepMs(t.exposed_seconds(), t.steps());
  }
  if (a.worker < 0) return a;
  a.communication_share = a.step_ms > 0 ? a.exposed_ms / a.step_ms : 0;
  const int percent = static_cast<int>(a.communication_share * 100 + 0.5);
  // --overlap where the job's model overlaps under it (mlp, async or ssp).
  proto::TrainingConfig overlapped = training;
  overlapped.set_overlap(true);
  const absl::StatusOr<const models::Model*> model = models::ModelFor(training);
  const bool can_overlap = !training.overlap() && model.ok() && (*model)->Overlaps(overlapped);
  if (a.communication_share >= kCommunicationBound) {
    std::vector<std::string> flags;
    if (training.wire_dtype() != proto::DT_BFLOAT16) {
      flags.push_back("--wire_dtype=bf16 (where the network is the limit)");
    }
    if (can_overlap) flags.push_back("--overlap");
    flags.push_back("a larger --batch_size");
    std::string list = flags.back();
    if (flags.size() > 1) {
      flags.pop_back();
      list = absl::StrCat(absl::StrJoin(flags, ", "), " or ", list);
    }
    a.advice = absl::StrCat("communication is ", percent, "% of a step: try ", list);
  } else if (a.communication_share < kComputeBound) {
    a.advice = absl::StrCat("compute is ", 100 - percent,
                            "% of a step: more workers, or a GPU (--device=gpu), would help most");
  } else {
    a.advice = absl::StrCat("compute and communication are balanced (", percent,
                            "% of a step communicating)",
                            can_overlap ? ": --overlap would hide one behind the other" : "");
  }
  a.line = absl::StrFormat(
      "slowest worker %d: %.2f ms a step: compute %.2f ms, push+pull %.2f ms (%.2f ms of it not "
      "hidden); %s",
      a.worker, a.step_ms, a.compute_ms, a.communication_ms, a.exposed_ms, a.advice);
  return a;
}

nlohmann::json StepTimesJson(const std::vector<proto::StepTimes>& times) {
  nlohmann::json out = nlohmann::json::array();
  for (const proto::StepTimes& t : times) {
    if (t.steps() <= 0) {
      out.push_back(nullptr);
      continue;
    }
    const double steps = static_cast<double>(t.steps());
    out.push_back({{"steps", t.steps()},
                   {"compute_ms", PerStepMs(t.compute_seconds(), t.steps())},
                   {"communication_ms", PerStepMs(t.communication_seconds(), t.steps())},
                   {"exposed_ms", PerStepMs(t.exposed_seconds(), t.steps())},
                   {"pushed_kb", static_cast<double>(t.pushed_bytes()) / 1e3 / steps},
                   {"pulled_kb", static_cast<double>(t.pulled_bytes()) / 1e3 / steps}});
  }
  return out;
}

}  // namespace pst::chief
