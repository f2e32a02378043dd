// PsControl over gRPC: one channel per ps, reused for every call; each call
// gets its timeout as its deadline (CreateVariables waits for the ps to come
// up within it), and gRPC's status comes back as the canonical absl one.
#ifndef PST_CLIENT_GRPC_PS_CONTROL_H_
#define PST_CLIENT_GRPC_PS_CONTROL_H_

#include <memory>
#include <string>
#include <vector>

#include "common/ps_control.h"
#include "rpc/grpc_channel.h"

namespace pst::client {

// The ps at `addresses` ("host:port", by ps index). Thread-safe.
std::unique_ptr<common::PsControl> MakeGrpcPsControl(const std::vector<std::string>& addresses,
                                                     const rpc::RpcSettings& settings);

}  // namespace pst::client

#endif  // PST_CLIENT_GRPC_PS_CONTROL_H_
