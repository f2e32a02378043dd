// CoordinatorClient over gRPC: one channel, reused for every call; each call
// gets its timeout as its deadline, and gRPC's status comes back as the
// canonical absl one.
#ifndef PST_CLIENT_GRPC_COORDINATOR_CLIENT_H_
#define PST_CLIENT_GRPC_COORDINATOR_CLIENT_H_

#include <memory>
#include <string>

#include "client/coordinator_client.h"
#include "rpc/grpc_channel.h"

namespace pst::client {

// The coordinator at `address` ("host:port"). Thread-safe.
std::unique_ptr<CoordinatorClient> MakeGrpcCoordinatorClient(const std::string& address,
                                                             const rpc::RpcSettings& settings);

}  // namespace pst::client

#endif  // PST_CLIENT_GRPC_COORDINATOR_CLIENT_H_
