// A real gRPC server with pstrain's limits (StartServer, ServerLimits,
// BoundedService): control calls over the control limit are refused
// RESOURCE_EXHAUSTED unparsed, the data plane still takes big messages, and
// one connection never has more calls running than the stream limit.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/grpc_bounded_service.h"
#include "rpc/grpc_channel.h"
#include "rpc/wire_codec.h"
#include "proto/pstrain.grpc.pb.h"
#include "rpc/free_port_test_util.h"

namespace pst::rpc {
namespace {

using testing::FreePort;

// Health is a bounded control call that parks (until Release) when its
// caller is "park"; PushPull is unbounded, as on the ps. Thread-safe.
class TestService final : public BoundedService<proto::ParameterServer::CallbackService> {
 public:
  explicit TestService(const ServerLimits& limits) {
    BoundRequestSize(&TestService::Health, proto::ParameterServer::service_full_name(), "Health",
                     limits);
  }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest* request,
                                   proto::HealthResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    absl::MutexLock lock(&mu_);
    ++health_calls_;
    if (request->caller() != "park") {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    parked_.push_back(reactor);
    max_parked_ = std::max(max_parked_, parked_.size());
    return reactor;
  }

  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* context,
                                     const proto::PushPullRequest* request,
                                     proto::PullResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_push_bytes_ = request->ByteSizeLong();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // Waits up to `timeout` for `n` calls parked at once; true if they were.
  bool AwaitParked(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return parked_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // Finishes the parked calls; returns how many.
  size_t Release() {
    absl::MutexLock lock(&mu_);
    for (grpc::ServerUnaryReactor* reactor : parked_) reactor->Finish(grpc::Status::OK);
    const size_t n = parked_.size();
    parked_.clear();
    return n;
  }

  int health_calls() {
    absl::MutexLock lock(&mu_);
    return health_calls_;
  }
  size_t max_parked() {
    absl::MutexLock lock(&mu_);
    return max_parked_;
  }
  size_t last_push_bytes() {
    absl::MutexLock lock(&mu_);
    return last_push_bytes_;
  }

 private:
  absl::Mutex mu_;
  int health_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<grpc::ServerUnaryReactor*> parked_ ABSL_GUARDED_BY(mu_);
  size_t max_parked_ ABSL_GUARDED_BY(mu_) = 0;
  size_t last_push_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

const std::string& HealthMethod() {
  static const std::string* name =
      new std::string(absl::StrCat("/", proto::ParameterServer::service_full_name(), "/Health"));
  return *name;
}

// One unary call of `request` to `method`, waited for (30 s deadline).
grpc::Status Call(grpc::GenericStub* stub, const std::string& method,
                  const google::protobuf::Message& request) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(30));
  const grpc::ByteBuffer bytes = SerializeMessage(request);
  grpc::ByteBuffer response;
  absl::Mutex mu;
  bool done = false;
  grpc::Status result;
  stub->UnaryCall(&context, method, grpc::StubOptions(), &bytes, &response,
                  [&](grpc::Status status) {
                    absl::MutexLock lock(&mu);
                    result = std::move(status);
                    done = true;
                  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  return result;
}

class GrpcServerLimitsTest : public ::testing::Test {
 protected:
  void StartWith(const ServerLimits& limits) {
    RpcSettings settings;
    settings.limits = limits;
    service_ = std::make_unique<TestService>(limits);
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer(
        address_, {{service_.get(), proto::ParameterServer::service_full_name()}}, settings,
        address_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = std::make_unique<grpc::GenericStub>(MakeChannel(address_, RpcSettings()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  std::unique_ptr<TestService> service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(GrpcServerLimitsTest, ControlCallOverTheLimitIsRefusedUnparsed_DataPlaneTakesBigMessages) {
  ServerLimits limits;
  limits.max_control_message_bytes = 1 << 20;
  StartWith(limits);

  proto::HealthRequest big;
  big.set_caller(std::string((1 << 20) + 100, 'x'));
  const grpc::Status refused = Call(stub_.get(), HealthMethod(), big);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "limit of 1048576 bytes"))
      << refused.error_message();
  EXPECT_TRUE(absl::StrContains(refused.error_message(), HealthMethod()))
      << refused.error_message();
  EXPECT_EQ(service_->health_calls(), 0);  // the method never ran

  // Just under the limit, and a small one: served.
  big.set_caller(std::string((1 << 20) - 100, 'x'));
  EXPECT_TRUE(Call(stub_.get(), HealthMethod(), big).ok());
  proto::HealthRequest small;
  small.set_caller("chief");
  EXPECT_TRUE(Call(stub_.get(), HealthMethod(), small).ok());
  EXPECT_EQ(service_->health_calls(), 2);

  // The data plane is not bounded by the control limit.
  proto::PushPullRequest push;
  push.mutable_push()->add_gradients()->set_data(std::string(32 << 20, '\1'));
  const grpc::Status pushed =
      Call(stub_.get(), absl::StrCat("/", proto::ParameterServer::service_full_name(), "/PushPull"),
           push);
  EXPECT_TRUE(pushed.ok()) << pushed.error_message();
  EXPECT_GT(service_->last_push_bytes(), size_t{32} << 20);
}

TEST_F(GrpcServerLimitsTest, OneConnectionRunsAtMostTheStreamLimit_TheRestWaitTheirTurn) {
  ServerLimits limits;
  limits.max_concurrent_streams = 2;
  StartWith(limits);
  proto::HealthRequest hello;
  ASSERT_TRUE(Call(stub_.get(), HealthMethod(), hello).ok());  // connected, settings known

  constexpr int kCalls = 7;
  proto::HealthRequest park;
  park.set_caller("park");
  const grpc::ByteBuffer bytes = SerializeMessage(park);
  std::vector<grpc::ClientContext> contexts(kCalls);
  std::vector<grpc::ByteBuffer> responses(kCalls);
  absl::Mutex mu;
  int ok = 0;
  int done = 0;
  for (int i = 0; i < kCalls; ++i) {
    SetDeadline(&contexts[i], absl::Seconds(60));
    stub_->UnaryCall(&contexts[i], HealthMethod(), grpc::StubOptions(), &bytes, &responses[i],
                     [&](grpc::Status status) {
                       absl::MutexLock lock(&mu);
                       ok += status.ok();
                       ++done;
                     });
  }
  ASSERT_TRUE(service_->AwaitParked(2, absl::Seconds(30)));
  // The other calls were sent too, yet no third one reaches the server.
  EXPECT_FALSE(service_->AwaitParked(3, absl::Milliseconds(300)));
  size_t released = 0;
  while (released < kCalls) {
    ASSERT_TRUE(service_->AwaitParked(std::min<size_t>(2, kCalls - released), absl::Seconds(30)))
        << released << " released";
    released += service_->Release();
  }
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                      +[](int* d) { return *d == kCalls; }, &done),
                                  absl::Seconds(30)));
  EXPECT_EQ(ok, kCalls);
  EXPECT_EQ(service_->max_parked(), 2u);
}

// The control limit's default leaves room for what control calls carry: a
// Restore of a plan of 10^4 partitioned variables with its 64 shards.
TEST(ServerLimitsTest, DefaultControlLimitHoldsARestoreOfTenThousandVariables) {
  proto::RestoreRequest restore;
  restore.set_checkpoint("ckpt-000000001234");
  proto::CheckpointManifest* manifest = restore.mutable_manifest();
  proto::PlacementPlan* plan = manifest->mutable_plan();
  plan->set_num_ps(64);
  for (int v = 0; v < 10'000; ++v) {
    proto::PlacementPlan::Entry* entry = plan->add_variables();
    proto::VariableSpec* spec = entry->mutable_spec();
    const std::string variable = absl::StrCat("model/tower_", v / 100, "/embedding_field_", v);
    spec->set_name(absl::StrCat(variable, "/part_", v % 64));
    spec->set_variable(variable);
    spec->add_shape(1'000'000 / 64);
    spec->add_shape(64);
    spec->add_full_shape(1'000'000);
    spec->add_full_shape(64);
    spec->set_partition(v % 64);
    spec->set_num_partitions(64);
    spec->mutable_initializer()->set_kind(proto::Initializer::NORMAL);
    spec->mutable_initializer()->set_scale(0.05f);
    spec->mutable_initializer()->set_seed(0x9e3779b97f4a7c15ull + v);
    entry->set_ps_index(v % 64);
  }
  for (int s = 0; s < 64; ++s) {
    proto::CheckpointShard* shard = manifest->add_shards();
    shard->set_file(absl::StrCat("shard-", s, "-of-64.pst"));
    shard->set_bytes(int64_t{1} << 30);
    shard->set_ps_index(s);
    shard->set_crc32(0xdeadbeef);
  }
  const size_t bytes = restore.ByteSizeLong();
  std::printf("a restore of 10^4 variables: %zu bytes\n", bytes);
  EXPECT_LT(bytes * 4, ServerLimits().max_control_message_bytes);
}

}  // namespace
}  // namespace pst::rpc
