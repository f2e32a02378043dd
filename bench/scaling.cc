#include "bench/scaling.h"

#include <unistd.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/case_runner.h"
#include "bench/cases.h"
#include "tools/netns.h"

namespace pst::bench {

Scaling RunScaling(const Options& options, const std::string& link_rate) {
  Scaling scaling;
  scaling.link_rate = link_rate;
  if (!link_rate.empty() && (geteuid() != 0 || tools::IpPath().empty())) {
    scaling.skipped = "shaped links need root and iproute2";
    return scaling;
  }
  Options o = options;
  o.sizes = {options.scaling_size};
  o.cases = {"pushpull"};
  o.workers_as = {options.ScalingWorkersAs()};
  o.wire = {"float32"};
  o.link_rate = link_rate;
  for (int num_ps : {1, 2}) {
    std::vector<Result> results;
    const absl::Status status = RunConfig(o, num_ps, /*num_workers=*/2, &results);
    const std::string error = !status.ok()          ? std::string(status.message())
                              : results.size() != 1 ? "no result"
                                                    : results[0].error;
    if (!error.empty()) {
      scaling.error = absl::StrCat(num_ps, " ps: ", error);
      return scaling;
    }
    (num_ps == 1 ? scaling.one_ps_gbps : scaling.two_ps_gbps) = results[0].gbps;
  }
  return scaling;
}

}  // namespace pst::bench
