// Per-method figures of a gRPC server, in a common::MetricsExporter's registry:
// requests by status code, latency, and bytes received and sent. Methods the
// server does not serve count as one method, "unknown" (kUnknownMethod), so
// clients calling made-up names cannot add series without bound.
//
// Thread-safety: the interceptors may run on any of the server's threads.
#ifndef PST_RPC_GRPC_METRICS_H_
#define PST_RPC_GRPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace pst::rpc {

// The method label of calls to methods a server does not serve.
inline constexpr char kUnknownMethod[] = "unknown";

// Server interceptors counting into `exporter` (which must outlive the
// server) for a server whose services serve `served_methods`
// ("/pkg.Service/Method"). Calls to any other name (gRPC answers them
// UNIMPLEMENTED) count under method="unknown".
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MetricsInterceptors(common::MetricsExporter& exporter, const std::vector<std::string>& served_methods);

}  // namespace pst::rpc

#endif  // PST_RPC_GRPC_METRICS_H_
