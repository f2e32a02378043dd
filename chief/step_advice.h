// What the end of a job says about its speed: where the slowest worker's
// steps went (the step times each worker reports when it finishes), and
// the flag that would help most. The chief logs it and puts it in the
// summary JSON, so `pstrain local` ends with it.
//
// Pure functions; thread-safe.
#ifndef PST_CHIEF_STEP_ADVICE_H_
#define PST_CHIEF_STEP_ADVICE_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::chief {

struct StepAdvice {
  int worker = -1;        // the slowest worker; -1: no worker reported its times
  double step_ms = 0;     // compute plus the communication not hidden, a step
  double compute_ms = 0;  // a step
  double communication_ms = 0;
  double exposed_ms = 0;  // of communication_ms, not hidden behind compute
  // exposed / (compute + exposed): the share of a step spent waiting on
  // the ps.
  double communication_share = 0;
  std::string advice;  // "communication is 80% of a step: try ..."
  std::string line;    // the whole sentence the chief logs
};

// The slowest of `times` (by worker; steps 0: not reported) and what would
// help it, given the job's `training`.
StepAdvice AdviseOnSteps(const std::vector<proto::StepTimes>& times,
                         const proto::TrainingConfig& training);

// Each worker's times per step, for the summary JSON.
nlohmann::json StepTimesJson(const std::vector<proto::StepTimes>& times);

}  // namespace pst::chief

#endif  // PST_CHIEF_STEP_ADVICE_H_
