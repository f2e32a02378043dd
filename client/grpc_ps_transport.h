// PsTransport over gRPC: channels per ps reused for every call, each call
// with a deadline. The dense calls (PullDense, PushPullDense, PushDense)
// travel zero-copy (rpc/wire_codec.h) over a small pool of connections
// per ps; the rest over one.
#ifndef PST_CLIENT_GRPC_PS_TRANSPORT_H_
#define PST_CLIENT_GRPC_PS_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/ps_transport.h"
#include "rpc/grpc_channel.h"

namespace pst::client {

// Channels to the ps at `addresses` under `settings`; every call has
// `rpc_timeout`.
std::unique_ptr<common::PsTransport> MakeGrpcPsTransport(const std::vector<std::string>& addresses,
                                                         const rpc::RpcSettings& settings,
                                                         absl::Duration rpc_timeout);

// Bytes of messages every gRPC transport of this process has sent to the
// ps (requests) and received from them (answers to calls that succeeded),
// as they travel on the wire before HTTP/2 framing. Totals over the
// process's life, so a worker that builds a new transport after a failure
// keeps counting up. Thread-safe.
struct PsTraffic {
  int64_t sent_bytes = 0;
  int64_t received_bytes = 0;
};
PsTraffic ProcessPsTraffic();

}  // namespace pst::client

#endif  // PST_CLIENT_GRPC_PS_TRANSPORT_H_
