// gRPC channels and servers as every daemon makes them: message size
// limits, keepalive, and the settings a main hands down (RpcSettings:
// transport security, server limits, the BDP probe).
#ifndef PST_RPC_GRPC_CHANNEL_H_
#define PST_RPC_GRPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/transport_security.h"

namespace pst::rpc {

// Largest message any pstrain RPC sends or accepts.
inline constexpr int kMaxMessageBytes = 512 << 20;

// The window a fixed-window dense connection (RpcSettings::dense_bdp_probe
// false) uses. It only lets a peer send before it is read; every byte of a
// request is read anyway, so it costs no memory.
inline constexpr int kDenseWindowBytes = 16 << 20;

// A server's limits beyond kMaxMessageBytes (flags --grpc_max_concurrent_streams,
// --grpc_memory_quota_mb, --grpc_max_threads, --grpc_max_control_message_mb).
struct ServerLimits {
  // HTTP/2 streams (calls) one client connection may have open at once;
  // more wait in the client's queue until one ends. 0: no limit. The
  // worker's dense calls (pieces of --dense_piece_bytes, 512 KiB, pipelined
  // over 4 connections per ps) and parked SYNC/SSP pulls each hold one, so
  // the default leaves room for a big model's pieces all in flight.
  int max_concurrent_streams = 1024;
  // gRPC's resource quota: memory its buffers may use (near it gRPC reads
  // more slowly and may close idle connections), and threads its
  // synchronous handlers may use (pstrain's services use the callback API,
  // which this does not count). 0: no limit.
  int64_t memory_quota_bytes = int64_t{8} << 30;
  int max_threads = 256;
  // Largest request a control method (BoundedService, grpc_bounded_service.h)
  // accepts; the data plane (Pull, Push, PushPull, PullRows, PushRows) takes
  // kMaxMessageBytes. 0: no limit beyond kMaxMessageBytes.
  size_t max_control_message_bytes = 16 << 20;
};

// How a process's channels and servers are set up. A main builds one from
// its flags (flags/job_flags.h: RpcSettingsFromFlags) and hands it to what
// it runs; the Python module and the tests build their own. The defaults
// are plaintext, the limits above and gRPC's BDP probing.
struct RpcSettings {
  // TLS, tokens and roles (common/transport_security.h).
  common::TransportSecurity security;
  ServerLimits limits;
  // --bdp_probe: whether the dense connections (a worker's pool per ps) and
  // the servers keep gRPC's BDP probing (the default). gRPC starts each
  // HTTP/2 stream at a 64 KiB window and grows it by pinging alongside the
  // data. Measured on 2 cores over loopback, interleaved runs: without the
  // probe, a fixed window took ps_bench's 1M-float PushPull from 2.3-2.5
  // to 2.9-3.1 GB/s, and the Fashion-MNIST cluster of bench/throughput.sh
  // from 28.9-30.6k to 24.7-28.1k examples/s.
  bool dense_bdp_probe = true;
};

// A channel to `address` ("host:port") under `settings`. Channels are meant
// to be created once per peer and reused. Channels of different
// `connection` numbers get TCP connections of their own (gRPC otherwise
// shares one among channels with equal settings). Numbers above 0 are the
// dense data plane's connections (a worker's pool per ps): without
// settings.dense_bdp_probe they, and every server's side, use a fixed
// kDenseWindowBytes HTTP/2 window instead of gRPC's BDP probing.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const RpcSettings& settings, int connection = 0);

// Applies pstrain's limits (kMaxMessageBytes, settings.limits) and the BDP
// setting to a server under construction.
void ConfigureServerBuilder(grpc::ServerBuilder* builder, const RpcSettings& settings);

// Sets a deadline `timeout` from now; with wait_for_ready the call waits
// for the peer to come up instead of failing at once.
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout, bool wait_for_ready = false);

// The address to listen on for a TF_CONFIG "host:port": by default all
// interfaces on that port, so the same spec works behind NAT and in
// containers; `bind` ("host" or "host:port", e.g. from --bind) overrides the
// host, or both.
std::string ListenAddress(const std::string& advertised, const std::string& bind = "");

// The host ListenAddress listens on, for a daemon's other ports (its
// --metrics_port): "0.0.0.0" (every interface) when `bind` is empty, else
// bind's host ("127.0.0.1" for "127.0.0.1:3000", "::1" for "[::1]").
std::string ListenHost(const std::string& bind);

// A service for StartServer: the implementation, and the full name of the
// generated service it implements ("pkg.Service", e.g.
// proto::Coordinator::service_full_name()). The server's metrics label
// calls by method for that service's methods (and gRPC's health service's);
// a call to any other name counts as method "unknown".
struct ServedService {
  grpc::Service* service;
  std::string name;
};

// Whether `host` (a ListenHost) is this machine's loopback only.
bool IsLoopbackHost(const std::string& host);

// Builds and starts a server for `services` listening on
// ListenAddress(advertised, bind) under `settings` (its credentials,
// limits and windows), counting its calls per method into `metrics` when
// given (MetricsInterceptors; it must outlive the server). Errors: InvalidArgument when a
// service's name is no generated service's; Unavailable naming the address
// when the port cannot be bound. Logs a warning when it listens beyond
// loopback in plaintext (anyone who reaches the port controls the job), or
// with TLS but no roles (settings.security.roles()).
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& advertised, const std::vector<ServedService>& services,
    const RpcSettings& settings, const std::string& bind = "",
    common::MetricsExporter* metrics = nullptr);

}  // namespace pst::rpc

#endif  // PST_RPC_GRPC_CHANNEL_H_
