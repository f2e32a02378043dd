// Requests the integration tests send to a ps, built the same way in each.
#ifndef PST_TESTS_TEST_REQUESTS_H_
#define PST_TESTS_TEST_REQUESTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/pstrain.pb.h"

namespace pst::testing {

// A float32 variable of `shape`, initialized NORMAL (scale 0.1) from `seed`.
proto::VariableSpec FloatSpec(const std::string& name, const std::vector<int64_t>& shape,
                              int64_t seed);

// Creates "w" (float [4], SGD at rate 1) on a ps.
proto::CreateVariablesRequest CreateW();

// A push of ones to "w" as `worker_index`.
proto::PushRequest OnesPush(int worker_index);

}  // namespace pst::testing

#endif  // PST_TESTS_TEST_REQUESTS_H_
