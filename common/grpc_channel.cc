#include "common/grpc_channel.h"

#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/tf_config.h"
#include "common/transport_security.h"

namespace pst::common {

namespace {
std::atomic<bool> dense_bdp_probe{true};
}  // namespace

void SetDenseBdpProbe(bool enabled) { dense_bdp_probe.store(enabled); }

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, int connection) {
  grpc::ChannelArguments args;
  if (connection != 0) args.SetInt("pstrain.connection", connection);
  if (connection != 0 && !dense_bdp_probe.load()) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kDenseWindowBytes);
  }
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  // Reconnect quickly to a peer that restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  // A peer that restarts in a container or pod often comes back at a new
  // address under the same name: look the name up again within a second of
  // a failed connection (gRPC's default waits 30 s between lookups).
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1'000);
  const TransportSecurity& security = GetTransportSecurity();
  if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  return grpc::CreateCustomChannel(address, MakeChannelCredentials(security), args);
}

void ConfigureServerBuilder(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  if (!dense_bdp_probe.load()) {
    builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kDenseWindowBytes);
  }
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout, bool wait_for_ready) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  context->set_wait_for_ready(wait_for_ready);
}

std::string ListenAddress(const std::string& advertised, const std::string& bind) {
  std::string host;
  int port = 0;
  if (!ParseHostPort(advertised, &host, &port).ok()) return bind.empty() ? advertised : bind;
  if (bind.empty()) return "0.0.0.0:" + std::to_string(port);
  std::string bind_host;
  int bind_port = 0;
  if (ParseHostPort(bind, &bind_host, &bind_port).ok()) return bind;  // host:port
  return bind + ":" + std::to_string(port);                           // host alone
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& advertised, const std::vector<grpc::Service*>& services,
    const std::string& bind) {
  const std::string listen = ListenAddress(advertised, bind);
  // The standard grpc.health.v1 service: `pstrain health`, Kubernetes' gRPC
  // probes and any gRPC health checker can ask whether the daemon serves.
  grpc::EnableDefaultHealthCheckService(true);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(GetTransportSecurity());
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder);
  int bound_port = 0;
  builder.AddListeningPort(listen, *credentials, &bound_port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (MetricsExporter* metrics = ProcessMetrics(); metrics != nullptr) {
    builder.experimental().SetInterceptorCreators(metrics->RpcInterceptors());
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (for ", advertised, "): is the port in use?"));
  }
  return server;
}

}  // namespace pst::common
