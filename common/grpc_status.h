// The only place absl::Status and grpc::Status meet.
#ifndef PST_COMMON_GRPC_STATUS_H_
#define PST_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pst::common {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace pst::common

#endif  // PST_COMMON_GRPC_STATUS_H_
