// The only place absl::Status and grpc::Status meet.
#ifndef PST_RPC_GRPC_STATUS_H_
#define PST_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pst::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace pst::rpc

#endif  // PST_RPC_GRPC_STATUS_H_
