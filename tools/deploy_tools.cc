#include "tools/deploy_tools.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "rpc/grpc_channel.h"
#include "rpc/grpc_status.h"
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

absl::StatusOr<std::string> CheckHealth(const std::string& address,
                                        const rpc::RpcSettings& settings,
                                        absl::Duration timeout) {
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message;
  // the response is {status: enum} (field 1, varint).
  grpc::GenericStub stub(rpc::MakeChannel(address, settings));
  grpc::ClientContext context;
  rpc::SetDeadline(&context, timeout, /*wait_for_ready=*/true);
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat(address, ": no answer within ",
                     absl::FormatDuration(absl::Ceil(timeout, absl::Milliseconds(1))),
                     " (nothing serving there, or the address is unreachable)"));
  }
  if (!status.ok()) {
    absl::Status error = rpc::FromGrpcStatus(status);
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

namespace {

// Resolves `host` to its first IPv4/IPv6 address; the error text otherwise.
absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port, socklen_t* length) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string bare =
      host.size() > 1 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
  const int rc = getaddrinfo(bare.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) return absl::NotFoundError(gai_strerror(rc));
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  freeaddrinfo(found);
  return address;
}

// Binds a TCP socket to `address`; errno's text when it cannot.
absl::Status TryBind(const sockaddr_storage& address, socklen_t length) {
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  absl::Status status;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    status = absl::UnavailableError(std::strerror(errno));
  }
  close(fd);
  return status;
}

}  // namespace

Preflight CheckTask(const common::TfConfig& config, const rpc::RpcSettings& settings,
                    absl::Duration wait) {
  Preflight out;
  const std::string self = common::TaskIdString(config.task);
  const std::string& advertised = config.SelfAddress();
  std::string host;
  int port = 0;
  if (!common::ParseHostPort(advertised, &host, &port).ok()) {
    out.problems.push_back(absl::StrCat(self, ": '", advertised, "' is not host:port"));
    return out;
  }
  // This task's host must be this machine: binding to its address (port 0)
  // fails with EADDRNOTAVAIL otherwise.
  socklen_t length = 0;
  absl::StatusOr<sockaddr_storage> own = Resolve(host, 0, &length);
  if (!own.ok()) {
    out.problems.push_back(absl::StrCat(self, ": its own host '", host, "' does not resolve (",
                                        own.status().message(), ")"));
  } else if (absl::Status bound = TryBind(*own, length); !bound.ok()) {
    out.problems.push_back(absl::StrCat(
        self, ": '", host, "' is not an address of this machine (", bound.message(),
        "): peers could not reach this task there; run it on that host or fix its address"));
  } else {
    out.notes.push_back(absl::StrCat(self, ": '", host, "' is an address of this machine"));
  }
  // ps and chief (or worker 0 without a chief) listen on all interfaces at
  // their port.
  const bool listens = config.task.type == common::TaskType::kPs || config.IsCoordinator();
  if (listens) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    any.sin_port = htons(static_cast<uint16_t>(port));
    sockaddr_storage storage{};
    std::memcpy(&storage, &any, sizeof(any));
    if (absl::Status bound = TryBind(storage, sizeof(any)); !bound.ok()) {
      out.problems.push_back(absl::StrCat(self, ": port ", port,
                                          " cannot be bound on this machine (", bound.message(),
                                          "): another process holds it, or pick another port"));
    } else {
      out.notes.push_back(absl::StrCat(self, ": port ", port, " is free"));
    }
  }
  // Every peer's host resolves.
  bool all_resolve = true;
  for (common::TaskType type : {common::TaskType::kChief, common::TaskType::kPs,
                                common::TaskType::kWorker, common::TaskType::kEvaluator}) {
    const std::vector<std::string>& tasks = config.cluster.Tasks(type);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const std::string peer = common::TaskIdString({type, static_cast<int>(i)});
      std::string peer_host;
      int peer_port = 0;
      if (!common::ParseHostPort(tasks[i], &peer_host, &peer_port).ok()) continue;
      socklen_t peer_length = 0;
      absl::StatusOr<sockaddr_storage> resolved = Resolve(peer_host, peer_port, &peer_length);
      if (!resolved.ok()) {
        all_resolve = false;
        out.problems.push_back(absl::StrCat(peer, ": host '", peer_host, "' does not resolve (",
                                            resolved.status().message(), ")"));
      }
    }
  }
  if (all_resolve) out.notes.push_back("every host in the cluster resolves");
  // Optionally: the servers answer.
  if (wait > absl::ZeroDuration()) {
    const absl::Time deadline = absl::Now() + wait;
    std::vector<std::pair<std::string, std::string>> servers;
    const common::TaskId coordinator = config.cluster.CoordinatorTask();
    servers.emplace_back(common::TaskIdString(coordinator), config.cluster.CoordinatorAddress());
    for (size_t i = 0; i < config.cluster.ps.size(); ++i) {
      servers.emplace_back(common::TaskIdString({common::TaskType::kPs, static_cast<int>(i)}),
                           config.cluster.ps[i]);
    }
    for (const auto& [peer, address] : servers) {
      if (peer == self) continue;  // this task is the one about to start
      const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(100));
      absl::StatusOr<std::string> health = CheckHealth(address, settings, left);
      if (!health.ok()) {
        out.problems.push_back(absl::StrCat(peer, ": ", health.status().message()));
      } else if (*health != "SERVING") {
        out.problems.push_back(absl::StrCat(peer, " at ", address, " is ", *health));
      } else {
        out.notes.push_back(absl::StrCat(peer, " at ", address, " is serving"));
      }
    }
  }
  return out;
}

}  // namespace pst::tools
