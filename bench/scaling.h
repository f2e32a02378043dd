// The scaling comparison: what a second ps buys, measured on loopback and
// behind shaped links.
#ifndef PST_BENCH_SCALING_H_
#define PST_BENCH_SCALING_H_

#include <string>

#include "bench/ps_bench_options.h"

namespace pst::bench {

// What a second ps buys on one network: PushPull by 2 workers against 1
// ps, then against 2. On loopback every ps shares this machine's cores with
// the workers; behind shaped links each ps has a NIC of its own, as in a
// cluster, and the network is the limit more ps lift.
struct Scaling {
  std::string link_rate;  // empty: loopback
  double one_ps_gbps = 0, two_ps_gbps = 0;
  std::string skipped;  // why it did not run (no failure)
  std::string error;
};

// PushPull of options.scaling_size floats by 2 workers against 1 ps, then
// 2 ps, each behind a link of `link_rate` (empty: loopback). Skipped, not
// failed, when shaped links cannot be made here (not root, no iproute2).
Scaling RunScaling(const Options& options, const std::string& link_rate);

}  // namespace pst::bench

#endif  // PST_BENCH_SCALING_H_
