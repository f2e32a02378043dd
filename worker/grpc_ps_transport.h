// PsTransport over gRPC: channels per ps reused for every call, each call
// with a deadline. The dense calls (PullDense, PushPullDense, PushDense)
// travel zero-copy (common/wire_codec.h) over a small pool of connections
// per ps; the rest over one.
#ifndef PST_WORKER_GRPC_PS_TRANSPORT_H_
#define PST_WORKER_GRPC_PS_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/ps_transport.h"

namespace pst::worker {

std::unique_ptr<common::PsTransport> MakeGrpcPsTransport(const std::vector<std::string>& addresses,
                                                         absl::Duration rpc_timeout);

}  // namespace pst::worker

#endif  // PST_WORKER_GRPC_PS_TRANSPORT_H_
