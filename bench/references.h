// What this machine moves without the parameter servers, measured in the
// same run as the cases: a plain TCP stream over loopback (one connection
// and four) carrying messages of the cases' sizes, and memcpy.
#ifndef PST_BENCH_REFERENCES_H_
#define PST_BENCH_REFERENCES_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pst::bench {

struct References {
  double tcp_gbps = 0;     // one stream: the best over message sizes
  double tcp4_gbps = 0;    // four streams: the best over message sizes
  double memcpy_gbps = 0;  // at the largest message size
  int64_t memcpy_bytes = 0;
  std::map<int64_t, double> tcp_by_bytes;   // message bytes -> GB/s, one stream
  std::map<int64_t, double> tcp4_by_bytes;  // four streams
};

// The TCP references for each of `message_bytes` (REQUIRES: not empty) and
// memcpy at the largest, each measured for `budget`; prints a line per
// message size and one for memcpy as it goes.
// Errors: Internal if a loopback connection fails.
absl::StatusOr<References> MeasureReferences(const std::vector<int64_t>& message_bytes,
                                             absl::Duration budget);

}  // namespace pst::bench

#endif  // PST_BENCH_REFERENCES_H_
