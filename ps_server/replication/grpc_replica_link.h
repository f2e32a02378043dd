// A ReplicaLink over gRPC: a primary's forwards to the ps holding its
// backup (ParameterServer.Replicate), several in flight on one channel.
#ifndef PST_PS_SERVER_REPLICATION_GRPC_REPLICA_LINK_H_
#define PST_PS_SERVER_REPLICATION_GRPC_REPLICA_LINK_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "ps_server/replication/replica_source.h"
#include "rpc/grpc_channel.h"

namespace pst::ps {

// A link to the ps at `address`, over a channel made under `settings`. Each forward must be answered within
// `timeout`; the first (the create, sent while the cluster may be still
// starting) waits up to `startup_timeout` for the backup to come up.
std::unique_ptr<ReplicaLink> MakeGrpcReplicaLink(const std::string& address,
                                                 const rpc::RpcSettings& settings,
                                                 absl::Duration timeout,
                                                 absl::Duration startup_timeout);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_REPLICATION_GRPC_REPLICA_LINK_H_
