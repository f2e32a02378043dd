#include "tools/deploy_tools.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/tf_config.h"

namespace pst::tools {
namespace {

// "h1,h2:2223" -> {"h1:2222", "h2:2223"}.
absl::StatusOr<std::vector<std::string>> Hosts(const std::string& list, int default_port,
                                               const char* flag) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    std::string host(absl::StripAsciiWhitespace(item));
    std::string name;
    int port = 0;
    if (!common::ParseHostPort(host, &name, &port).ok()) {
      // No port: a bare host name or IPv4 address, or a bracketed IPv6 one.
      if (host.find(':') != std::string::npos && host.front() != '[') {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": '", host, "' is not host or host:port"));
      }
      host = absl::StrCat(host, ":", default_port);
    }
    out.push_back(host);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> BuildTfConfig(const TfConfigHosts& hosts) {
  if (hosts.default_port < 1 || hosts.default_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port=", hosts.default_port, " is not a port number (1-65535)"));
  }
  common::TfConfig config;
  for (auto [list, out, flag] :
       {std::tuple{&hosts.chief, &config.cluster.chief, "chief_hosts"},
        std::tuple{&hosts.ps, &config.cluster.ps, "ps_hosts"},
        std::tuple{&hosts.worker, &config.cluster.worker, "worker_hosts"},
        std::tuple{&hosts.evaluator, &config.cluster.evaluator, "evaluator_hosts"}}) {
    absl::StatusOr<std::vector<std::string>> parsed = Hosts(*list, hosts.default_port, flag);
    if (!parsed.ok()) return parsed.status();
    *out = *std::move(parsed);
  }
  absl::StatusOr<common::TaskType> type = common::ParseTaskType(hosts.task_type);
  if (!type.ok()) return type.status();
  config.task = {*type, hosts.task_index};
  // Validate exactly as the daemons will.
  const std::string json = common::TfConfigToJson(config);
  absl::StatusOr<common::TfConfig> checked = common::ParseTfConfig(json);
  if (!checked.ok()) return checked.status();
  return json;
}

absl::StatusOr<std::string> CheckHealth(const std::string& address, absl::Duration timeout) {
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message;
  // the response is {status: enum} (field 1, varint).
  grpc::GenericStub stub(common::MakeChannel(address));
  grpc::ClientContext context;
  common::SetDeadline(&context, timeout, /*wait_for_ready=*/true);
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat(address, ": no answer within ", absl::FormatDuration(timeout),
                     " (nothing serving there, or the address is unreachable)"));
  }
  if (!status.ok()) {
    absl::Status error = common::FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(address, ": ", error.message()));
  }
  grpc::Slice bytes;
  if (!response.DumpToSingleSlice(&bytes).ok()) {
    return absl::DataLossError(absl::StrCat(address, ": unreadable health answer"));
  }
  const std::string_view body(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  int value = 0;  // UNKNOWN when the field is absent (proto3 default)
  if (!body.empty()) {
    if (body.size() != 2 || body[0] != 0x08 || (body[1] & 0x80) != 0) {
      return absl::DataLossError(
          absl::StrCat(address, ": the answer is not a grpc.health.v1 HealthCheckResponse"));
    }
    value = body[1];
  }
  static constexpr const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  return value < 4 ? std::string(kNames[value]) : absl::StrCat("status ", value);
}

}  // namespace pst::tools
