// gRPC credentials for a TransportSecurity (common/transport_security.h):
// TLS or mutual TLS, the bearer token every call sends, and on servers the
// check of that token (one shared token, or per-role tokens whose task the
// auth context then carries as kTokenTaskProperty).
#ifndef PST_COMMON_GRPC_CREDENTIALS_H_
#define PST_COMMON_GRPC_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/statusor.h"
#include "common/transport_security.h"

namespace pst::common {

// Credentials for a channel or a listening port under `security`.
// Errors (servers): FailedPrecondition when TLS is asked for (--tls_ca)
// but this process has no certificate to serve with.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TransportSecurity& security);
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TransportSecurity& security);

}  // namespace pst::common

#endif  // PST_COMMON_GRPC_CREDENTIALS_H_
