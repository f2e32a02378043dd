// gRPC credentials for a common::TransportSecurity (common/transport_security.h):
// TLS or mutual TLS, the bearer token every call sends, and on servers the
// check of that token (one shared token, or per-role tokens whose task the
// auth context then carries as common::kTokenTaskProperty).
#ifndef PST_RPC_GRPC_CREDENTIALS_H_
#define PST_RPC_GRPC_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/statusor.h"
#include "common/transport_security.h"

namespace pst::rpc {

// Credentials for a channel or a listening port under `security`.
// Errors (servers): FailedPrecondition when TLS is asked for (--tls_ca)
// but this process has no certificate to serve with.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const common::TransportSecurity& security);
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const common::TransportSecurity& security);

}  // namespace pst::rpc

#endif  // PST_RPC_GRPC_CREDENTIALS_H_
