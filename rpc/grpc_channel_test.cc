// Where a daemon listens: every interface at its TF_CONFIG port, unless
// --bind says otherwise; its metrics port on the same host.
#include "rpc/grpc_channel.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/pstrain.grpc.pb.h"
#include "rpc/free_port_test_util.h"

namespace pst::rpc {
namespace {

TEST(ListenAddressTest, DefaultsToEveryInterface_BindOverridesHostOrBoth) {
  EXPECT_EQ(ListenAddress("ps-0.example:2222"), "0.0.0.0:2222");
  EXPECT_EQ(ListenAddress("ps-0.example:2222", "127.0.0.1"), "127.0.0.1:2222");
  EXPECT_EQ(ListenAddress("ps-0.example:2222", "10.0.0.5:3000"), "10.0.0.5:3000");
  EXPECT_EQ(ListenAddress("ps-0.example:2222", "[::1]"), "[::1]:2222");
  EXPECT_EQ(ListenAddress("ps-0.example:2222", "[::]:2300"), "[::]:2300");
}

TEST(ListenHostTest, EveryInterfaceWithoutBind_ElseBindsHost) {
  EXPECT_EQ(ListenHost(""), "0.0.0.0");
  EXPECT_EQ(ListenHost("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(ListenHost("10.0.0.5:3000"), "10.0.0.5");
  EXPECT_EQ(ListenHost("[::1]"), "::1");
  EXPECT_EQ(ListenHost("[::]:2300"), "::");
  EXPECT_EQ(ListenHost("ps-0.example"), "ps-0.example");
}

using testing::FreePort;

TEST(StartServerTest, BindNamesThePort_OrAnUnusableAddressIsUnavailableNamingIt) {
  proto::ParameterServer::CallbackService unimplemented;  // gRPC needs some service
  // TF_CONFIG port 1 is privileged: only --bind's port can work.
  const absl::StatusOr<std::unique_ptr<grpc::Server>> good =
      StartServer("127.0.0.1:1", {{&unimplemented, proto::ParameterServer::service_full_name()}},
                  RpcSettings(), "127.0.0.1:" + std::to_string(FreePort()));
  EXPECT_TRUE(good.ok()) << good.status();
  const absl::StatusOr<std::unique_ptr<grpc::Server>> bad =
      StartServer("127.0.0.1:1", {{&unimplemented, proto::ParameterServer::service_full_name()}},
                  RpcSettings(), "256.0.0.1:5");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(bad.status().message()).find("256.0.0.1:5"), std::string::npos)
      << bad.status();
}

TEST(StartServerTest, AServiceNameNoGeneratedServiceHasIsInvalid) {
  proto::ParameterServer::CallbackService unimplemented;
  const absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartServer("127.0.0.1:1", {{&unimplemented, "pst.proto.NoSuchService"}},
                  RpcSettings(), "127.0.0.1:" + std::to_string(FreePort()));
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(server.status().message()).find("pst.proto.NoSuchService"),
            std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace pst::rpc
