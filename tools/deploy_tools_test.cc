// pstrain tfconfig and pstrain health, against the TF_CONFIG parser the
// daemons use and a real gRPC server.
#include "tools/deploy_tools.h"

#include <gtest/gtest.h>

#include "rpc/grpc_channel.h"
#include "common/tf_config.h"
#include "proto/pstrain.grpc.pb.h"
#include "tools/subprocess.h"

namespace pst::tools {
namespace {

TfConfigHosts Hosts() {
  TfConfigHosts hosts;
  hosts.chief = "c0";
  hosts.ps = "10.0.0.3, 10.0.0.4:2300";
  hosts.worker = "w1,[::1]:2400";
  hosts.task_type = "ps";
  hosts.task_index = 1;
  return hosts;
}

TEST(BuildTfConfigTest, FillsDefaultPorts_AndParsesAsTheDaemonsParse) {
  absl::StatusOr<std::string> json = BuildTfConfig(Hosts());
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<common::TfConfig> config = common::ParseTfConfig(*json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.chief, std::vector<std::string>{"c0:2222"});
  EXPECT_EQ(config->cluster.ps, (std::vector<std::string>{"10.0.0.3:2222", "10.0.0.4:2300"}));
  EXPECT_EQ(config->cluster.worker, (std::vector<std::string>{"w1:2222", "[::1]:2400"}));
  EXPECT_EQ(config->task.type, common::TaskType::kPs);
  EXPECT_EQ(config->task.index, 1);
  TfConfigHosts other_port = Hosts();
  other_port.default_port = 3000;
  EXPECT_EQ(common::ParseTfConfig(*BuildTfConfig(other_port))->cluster.chief,
            std::vector<std::string>{"c0:3000"});
}

TEST(BuildTfConfigTest, EveryMistake_IsInvalidArgumentSayingWhat) {
  struct Case {
    std::function<void(TfConfigHosts*)> change;
    const char* says;
  };
  const Case cases[] = {
      {[](TfConfigHosts* h) { h->ps = "a,a"; }, "used by both ps:0 and ps:1"},
      {[](TfConfigHosts* h) { h->ps = ""; }, "ps"},
      {[](TfConfigHosts* h) { h->worker = ""; }, "worker"},
      {[](TfConfigHosts* h) { h->task_type = "master"; }, "chief"},
      {[](TfConfigHosts* h) { h->task_index = 5; }, "out of range"},
      {[](TfConfigHosts* h) { h->ps = "a:b:c"; }, "ps_hosts"},
      {[](TfConfigHosts* h) { h->ps = "a:70000"; }, "70000"},
      {[](TfConfigHosts* h) { h->default_port = 0; }, "--port"},
  };
  for (const Case& c : cases) {
    TfConfigHosts hosts = Hosts();
    c.change(&hosts);
    absl::StatusOr<std::string> json = BuildTfConfig(hosts);
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_NE(std::string(json.status().message()).find(c.says), std::string::npos)
        << json.status();
  }
}

// A pstrain server on a free port of 127.0.0.1, with only the health
// service working (gRPC starts no server without some service).
struct HealthOnlyServer {
  proto::ParameterServer::CallbackService unimplemented;
  std::string address = "127.0.0.1:" + std::to_string(PickFreePorts(1).value().front());
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      rpc::StartServer(address, {{&unimplemented, proto::ParameterServer::service_full_name()}},
                       rpc::RpcSettings());
};

TEST(CheckHealthTest, ServingServer_ThenNothingThere) {
  HealthOnlyServer running;
  const std::string& address = running.address;
  absl::StatusOr<std::unique_ptr<grpc::Server>>& server = running.server;
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::string> health = CheckHealth(address, rpc::RpcSettings(), absl::Seconds(10));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
  (*server)->Shutdown();
  server->reset();
  health = CheckHealth(address, rpc::RpcSettings(), absl::Milliseconds(300));
  EXPECT_EQ(health.status().code(), absl::StatusCode::kDeadlineExceeded) << health.status();
  EXPECT_NE(std::string(health.status().message()).find(address), std::string::npos);
}

// A TF_CONFIG for task `type`:0 with ps [ps], worker [worker] and chief
// [chief] (empty: none).
common::TfConfig Config(const std::string& ps, const std::string& worker, const std::string& chief,
                        common::TaskType type) {
  common::TfConfig config;
  config.cluster.ps = {ps};
  config.cluster.worker = {worker};
  if (!chief.empty()) config.cluster.chief = {chief};
  config.task = {type, 0};
  return config;
}

bool Says(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& line : lines) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(CheckTaskTest, GoodLocalTask_HasNoProblems) {
  const std::vector<int> ports = PickFreePorts(3).value();
  const Preflight result = CheckTask(Config("127.0.0.1:" + std::to_string(ports[0]), "127.0.0.1:" + std::to_string(ports[1]),
             "localhost:" + std::to_string(ports[2]), common::TaskType::kPs), rpc::RpcSettings(),
      absl::ZeroDuration());
  EXPECT_TRUE(result.problems.empty()) << result.problems.front();
  EXPECT_TRUE(Says(result.notes, "is free"));
  EXPECT_TRUE(Says(result.notes, "every host in the cluster resolves"));
}

TEST(CheckTaskTest, EachProblem_IsOneLineNamingTheTask) {
  // This ps's port is held by a running server.
  HealthOnlyServer running;
  ASSERT_TRUE(running.server.ok()) << running.server.status();
  const std::string port = running.address.substr(running.address.rfind(':') + 1);
  Preflight result = CheckTask(Config(running.address, "127.0.0.1:1", "", common::TaskType::kPs), rpc::RpcSettings(),
                               absl::ZeroDuration());
  EXPECT_TRUE(Says(result.problems, "ps:0: port " + port + " cannot be bound"))
      << ::testing::PrintToString(result.problems);
  (*running.server)->Shutdown();

  // A peer whose name does not resolve (.invalid never does).
  result = CheckTask(Config("127.0.0.1:2", "nosuchhost.invalid:2222", "", common::TaskType::kPs), rpc::RpcSettings(),
                     absl::ZeroDuration());
  EXPECT_TRUE(Says(result.problems, "worker:0: host 'nosuchhost.invalid' does not resolve"))
      << ::testing::PrintToString(result.problems);

  // An address that is not this machine's (TEST-NET-1).
  result = CheckTask(Config("192.0.2.7:2222", "127.0.0.1:3", "", common::TaskType::kPs), rpc::RpcSettings(),
                     absl::ZeroDuration());
  EXPECT_TRUE(Says(result.problems, "ps:0: '192.0.2.7' is not an address of this machine"))
      << ::testing::PrintToString(result.problems);

  // A worker waiting for a ps that does not answer; the worker's own port
  // is not checked (with a chief listed, workers do not listen).
  const std::vector<int> free = PickFreePorts(3).value();
  result = CheckTask(Config("127.0.0.1:" + std::to_string(free[0]), "127.0.0.1:" + std::to_string(free[1]),
             "127.0.0.1:" + std::to_string(free[2]), common::TaskType::kWorker), rpc::RpcSettings(),
      absl::Milliseconds(300));
  EXPECT_TRUE(
      Says(result.problems, "ps:0: 127.0.0.1:" + std::to_string(free[0]) + ": no answer within"))
      << ::testing::PrintToString(result.problems);
  EXPECT_FALSE(Says(result.notes, "is free"));
}

}  // namespace
}  // namespace pst::tools
