#include "rpc/grpc_channel.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rpc/grpc_metrics.h"
#include "common/metrics.h"
#include "common/tf_config.h"
#include "rpc/grpc_credentials.h"
#include "common/transport_security.h"
#include "google/protobuf/descriptor.h"

namespace pst::rpc {

namespace {

// The full names ("/pkg.Service/Method") of the methods a server of
// `services` serves, gRPC's health service (StartServer enables it)
// included. Errors: InvalidArgument naming a service no generated code
// describes.
absl::StatusOr<std::vector<std::string>> ServedMethodNames(
    const std::vector<ServedService>& services) {
  std::vector<std::string> names = {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"};
  for (const ServedService& served : services) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(served.name);
    if (service == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("no generated gRPC service is named \"", served.name, "\""));
    }
    for (int i = 0; i < service->method_count(); ++i) {
      names.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
    }
  }
  return names;
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const RpcSettings& settings, int connection) {
  grpc::ChannelArguments args;
  if (connection != 0) args.SetInt("pstrain.connection", connection);
  if (connection != 0 && !settings.dense_bdp_probe) {
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
  const common::TransportSecurity& security = settings.security;
  if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  return grpc::CreateCustomChannel(address, MakeChannelCredentials(security), args);
}

void ConfigureServerBuilder(grpc::ServerBuilder* builder, const RpcSettings& settings) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  if (!settings.dense_bdp_probe) {
    builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kDenseWindowBytes);
  }
  const ServerLimits& limits = settings.limits;
  if (limits.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  }
  if (limits.memory_quota_bytes > 0 || limits.max_threads > 0) {
    // The builder keeps a reference to the quota's core object.
    grpc::ResourceQuota quota("pstrain-server");
    if (limits.memory_quota_bytes > 0) {
      quota.Resize(static_cast<size_t>(limits.memory_quota_bytes));
    }
    if (limits.max_threads > 0) quota.SetMaxThreads(limits.max_threads);
    builder->SetResourceQuota(quota);
  }
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout, bool wait_for_ready) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  context->set_wait_for_ready(wait_for_ready);
}

std::string ListenAddress(const std::string& advertised, const std::string& bind) {
  std::string host;
  int port = 0;
  if (!common::ParseHostPort(advertised, &host, &port).ok()) return bind.empty() ? advertised : bind;
  if (bind.empty()) return "0.0.0.0:" + std::to_string(port);
  std::string bind_host;
  int bind_port = 0;
  if (common::ParseHostPort(bind, &bind_host, &bind_port).ok()) return bind;  // host:port
  return bind + ":" + std::to_string(port);                           // host alone
}

std::string ListenHost(const std::string& bind) {
  if (bind.empty()) return "0.0.0.0";
  std::string host;
  int port = 0;
  if (common::ParseHostPort(bind, &host, &port).ok()) return host;  // host:port
  if (bind.size() >= 2 && bind.front() == '[' && bind.back() == ']') {
    return bind.substr(1, bind.size() - 2);  // [IPv6] alone
  }
  return bind;  // host alone
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& advertised, const std::vector<ServedService>& services,
    const RpcSettings& settings, const std::string& bind, common::MetricsExporter* metrics) {
  const std::string listen = ListenAddress(advertised, bind);
  const common::TransportSecurity& security = settings.security;
  if (!IsLoopbackHost(ListenHost(bind))) {
    if (!security.tls()) {
      spdlog::warn(
          "listening on {} without TLS: anyone who can reach this port controls the job (can "
          "read and change the parameters, shut the ps down); see docs/security.md "
          "(--tls_cert, --tls_key, --tls_ca)",
          listen);
    } else if (!security.roles()) {
      spdlog::warn(
          "serving on {} without roles: every caller the CA and token admit may make every "
          "call (save, restore, shut the ps down); see docs/security.md (certificates "
          "naming chief-0.pstrain, worker-N.pstrain, or --role_tokens_file)",
          listen);
    }
  }
  absl::StatusOr<std::vector<std::string>> methods = ServedMethodNames(services);
  if (!methods.ok()) return methods.status();
  // The standard grpc.health.v1 service: `pstrain health`, Kubernetes' gRPC
  // probes and any gRPC health checker can ask whether the daemon serves.
  grpc::EnableDefaultHealthCheckService(true);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(security);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder, settings);
  int bound_port = 0;
  builder.AddListeningPort(listen, *credentials, &bound_port);
  for (const ServedService& served : services) builder.RegisterService(served.service);
  if (metrics != nullptr) {
    builder.experimental().SetInterceptorCreators(MetricsInterceptors(*metrics, *methods));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (for ", advertised, "): is the port in use?"));
  }
  return server;
}

}  // namespace pst::rpc
