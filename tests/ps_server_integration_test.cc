// Starts a real ps_server and talks to it over gRPC.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_format.h"
#include "rpc/grpc_channel.h"
#include "common/tensor_util.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_requests.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

proto::VariableSpec Spec(const std::string& name, const std::vector<int64_t>& shape) {
  return FloatSpec(name, shape, /*seed=*/42);
}

void AddGradient(proto::PushRequest* push, const std::string& name, std::vector<int64_t> shape,
                 std::vector<float> values) {
  push->add_names(name);
  common::PackFloats(values, common::Shape(shape.begin(), shape.end()), push->add_gradients());
}

class PsServerTest : public LonePsTest {
 protected:
  grpc::Status CreateVariables(const proto::CreateVariablesRequest& request) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    proto::CreateVariablesResponse response;
    return stub_->CreateVariables(&context, request, &response);
  }
  grpc::Status Push(const proto::PushRequest& request) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::PushResponse response;
    return stub_->Push(&context, request, &response);
  }
  grpc::Status Pull(proto::PullResponse* response, std::vector<std::string> names = {}) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::PullRequest request;
    for (auto& n : names) request.add_names(n);
    return stub_->Pull(&context, request, response);
  }
};

TEST_F(PsServerTest, BadRequests_AreRejectedWithClearStatus_AndLeaveParametersUnchanged) {
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("w", {3, 4});
  *create.add_variables() = Spec("b", {4});
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.5f);
  grpc::Status created = CreateVariables(create);
  ASSERT_TRUE(created.ok()) << created.error_message() << "\n" << ps_->output();

  proto::PullResponse before;
  ASSERT_TRUE(Pull(&before).ok());

  struct Case {
    std::string what;
    proto::PushRequest push;
    grpc::StatusCode code;
    std::string message_part;
  };
  std::vector<Case> cases;
  {
    Case c{"unknown variable", {}, grpc::StatusCode::NOT_FOUND, "no variable named 'nope'"};
    AddGradient(&c.push, "b", {4}, {1, 1, 1, 1});
    AddGradient(&c.push, "nope", {4}, {1, 1, 1, 1});
    cases.push_back(c);
  }
  {
    Case c{"wrong shape", {}, grpc::StatusCode::INVALID_ARGUMENT, "shape [4, 3], expected [3, 4]"};
    AddGradient(&c.push, "b", {4}, {1, 1, 1, 1});
    AddGradient(&c.push, "w", {4, 3}, std::vector<float>(12, 1.0f));
    cases.push_back(c);
  }
  {
    Case c{"wrong size", {}, grpc::StatusCode::INVALID_ARGUMENT, "payload is 12 bytes"};
    AddGradient(&c.push, "b", {4}, {1, 1, 1, 1});
    c.push.mutable_gradients(0)->mutable_data()->resize(12);
    cases.push_back(c);
  }
  {
    Case c{"wrong dtype", {}, grpc::StatusCode::INVALID_ARGUMENT, "dtype DT_INVALID"};
    AddGradient(&c.push, "b", {4}, {1, 1, 1, 1});
    c.push.mutable_gradients(0)->set_dtype(proto::DT_INVALID);
    cases.push_back(c);
  }
  {
    Case c{"NaN gradient", {}, grpc::StatusCode::INVALID_ARGUMENT, "NaN"};
    AddGradient(&c.push, "b", {4}, {1, 1, 1, 1});
    AddGradient(&c.push, "w", {3, 4}, {1, 1, 1, 1, 1, NAN, 1, 1, 1, 1, 1, 1});
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    grpc::Status status = Push(c.push);
    EXPECT_EQ(status.error_code(), c.code) << c.what << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message_part), std::string::npos)
        << c.what << ": " << status.error_message();
  }
  // A create that conflicts with what exists changes nothing either.
  proto::CreateVariablesRequest conflicting = create;
  conflicting.mutable_variables(0)->set_shape(0, 5);
  EXPECT_EQ(CreateVariables(conflicting).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  proto::PullResponse unknown;
  EXPECT_EQ(Pull(&unknown, {"missing"}).error_code(), grpc::StatusCode::NOT_FOUND);

  proto::PullResponse after;
  ASSERT_TRUE(Pull(&after).ok());
  ASSERT_EQ(after.names_size(), before.names_size());
  for (int i = 0; i < after.names_size(); ++i) {
    EXPECT_EQ(after.values(i).data(), before.values(i).data()) << after.names(i);
    EXPECT_EQ(after.versions(i), 0) << after.names(i);
  }

  // A good push is applied exactly: b -= 0.5 * g.
  proto::PushRequest good;
  AddGradient(&good, "b", {4}, {1, 2, 3, 4});
  ASSERT_TRUE(Push(good).ok());
  proto::PullResponse applied;
  ASSERT_TRUE(Pull(&applied, {"b"}).ok());
  std::vector<float> b0(4), b1(4);
  common::UnpackFloats(before.values(0), b0);  // "b" sorts first
  common::UnpackFloats(applied.values(0), b1);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(b1[i], b0[i] - 0.5f * (i + 1));
  EXPECT_EQ(applied.versions(0), 1);

  // The chief's Shutdown ends the process with status 0.
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout);
  proto::ShutdownRequest shutdown;
  shutdown.set_reason("test done");
  proto::ShutdownResponse response;
  ASSERT_TRUE(stub_->Shutdown(&context, shutdown, &response).ok());
  std::optional<int> exited = ps_->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 0) << ps_->output();
}

TEST_F(PsServerTest, RetriedPush_IsAppliedExactlyOnce) {
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("b", {4});
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(CreateVariables(create).ok()) << ps_->output();
  proto::PullResponse before;
  ASSERT_TRUE(Pull(&before).ok());
  proto::PushRequest push;
  push.set_worker_index(0);
  push.set_incarnation(7);
  push.set_step(0);
  AddGradient(&push, "b", {4}, {1, 1, 1, 1});
  for (int attempt = 0; attempt < 3; ++attempt) {  // the first, then two retries
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::PushResponse response;
    ASSERT_TRUE(stub_->Push(&context, push, &response).ok());
    EXPECT_EQ(response.duplicate(), attempt > 0) << "attempt " << attempt;
  }
  proto::PullResponse after;
  ASSERT_TRUE(Pull(&after).ok());
  EXPECT_EQ(after.versions(0), 1);
  std::vector<float> b0(4), b1(4);
  common::UnpackFloats(before.values(0), b0);
  common::UnpackFloats(after.values(0), b1);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(b1[i], b0[i] - 1.0f);
  // The worker's next step is applied.
  push.set_step(1);
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout);
  proto::PushResponse response;
  ASSERT_TRUE(stub_->Push(&context, push, &response).ok());
  EXPECT_FALSE(response.duplicate());
  EXPECT_EQ(response.versions(0), 2);
}

// The chief names the incarnation it knows: a ps that restarted since (and
// so holds no variables, or not the job's) must not write a shard that would
// pass every checksum.
TEST_F(PsServerTest, Save_ForAnotherIncarnation_IsRefusedAndWritesNothing) {
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("b", {4});
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.1f);
  grpc::Status created = CreateVariables(create);
  ASSERT_TRUE(created.ok()) << created.error_message();
  proto::HealthResponse health;
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    ASSERT_TRUE(stub_->Health(&context, proto::HealthRequest(), &health).ok());
  }
  ASSERT_NE(health.incarnation(), 0u);
  const std::string name = common::CheckpointDirName(1);
  const std::string dir = checkpoint_dir_ + "/" + name;
  auto save = [&](uint64_t incarnation, proto::SaveResponse* response) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::SaveRequest request;
    request.set_checkpoint(name);
    request.set_num_ps(1);
    request.set_incarnation(incarnation);
    return stub_->Save(&context, request, response);
  };
  proto::SaveResponse refused;
  grpc::Status status = save(health.incarnation() + 1, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("restarted"), std::string::npos) << status.error_message();
  EXPECT_FALSE(std::filesystem::exists(dir)) << "a refused save wrote " << dir;

  proto::SaveResponse saved;
  status = save(health.incarnation(), &saved);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GT(saved.shard().bytes(), 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + saved.shard().file()));
}

// A pull parked in sync mode: a client deadline cancels it cleanly, and a
// shutdown finishes the ones still waiting.
TEST_F(PsServerTest, ParkedPull_IsCancelledByDeadline_AndFinishedByShutdown) {
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("b", {4});
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  create.mutable_sync()->set_mode(proto::SYNC);
  create.mutable_sync()->set_num_workers(2);
  ASSERT_TRUE(CreateVariables(create).ok()) << ps_->output();
  proto::PullRequest wait_for_step_1;
  wait_for_step_1.set_worker_index(0);
  wait_for_step_1.set_min_version(1);
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Milliseconds(300));
    proto::PullResponse response;
    EXPECT_EQ(stub_->Pull(&context, wait_for_step_1, &response).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  proto::HealthResponse health;
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    ASSERT_TRUE(stub_->Health(&context, proto::HealthRequest(), &health).ok());
  }
  EXPECT_EQ(health.parked_pulls(), 1);

  // Park another, then stop the ps: the waiting pull gets an answer.
  grpc::ClientContext parked_context;
  rpc::SetDeadline(&parked_context, kTimeout);
  proto::PullResponse parked_response;
  absl::Notification answered;
  grpc::Status parked_status;
  stub_->async()->Pull(&parked_context, &wait_for_step_1, &parked_response, [&](grpc::Status s) {
    parked_status = std::move(s);
    answered.Notify();
  });
  // Wait until the ps holds it (its count of parked pulls reaches 2).
  for (int64_t parked = 1; parked < 2;) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::HealthRequest request;
    ASSERT_TRUE(stub_->Health(&context, request, &health).ok());
    parked = health.parked_pulls();
    if (parked < 2) {
      // Not parked yet: it must not have been answered either.
      ASSERT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
    }
  }
  ps_->Signal(SIGTERM);
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_FALSE(parked_status.ok());
  std::optional<int> exited = ps_->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 0) << ps_->output();
}

// Pull and PushPull are raw methods on the ps (it parses them itself):
// bytes that are not the message get INVALID_ARGUMENT, and the ps serves on.
TEST_F(PsServerTest, GarbageBytesToTheRawMethods_AreInvalidArgument_AndThePsServesOn) {
  grpc::GenericStub generic(rpc::MakeChannel(spec_.ps[0], rpc::RpcSettings()));
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f not a message";
  for (const char* method : {"Pull", "PushPull"}) {
    grpc::Slice slice(garbage.data(), garbage.size());
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    grpc::Status status;
    absl::Notification done;
    generic.UnaryCall(&context, absl::StrCat("/pst.proto.ParameterServer/", method),
                      grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_NE(status.error_message().find("not a valid"), std::string::npos)
        << status.error_message();
  }
  proto::PullResponse pulled;
  EXPECT_TRUE(Pull(&pulled).ok()) << "the ps still answers";
}

// `pstrain health` asks the standard grpc.health.v1 service, as Docker
// healthchecks and Kubernetes' gRPC probes do.
TEST_F(PsServerTest, PstrainHealth_SaysServing_AndFailsOnAClosedPort) {
  auto health = TestProcess::Start({BinaryPath("pstrain"), "health", spec_.ps[0]}, {});
  ASSERT_TRUE(health.ok());
  std::optional<int> exited = (*health)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 0) << (*health)->output();
  EXPECT_NE((*health)->output().find(spec_.ps[0] + " SERVING"), std::string::npos)
      << (*health)->output();
  // The worker's address in the spec: nothing listens there.
  auto closed = TestProcess::Start(
      {BinaryPath("pstrain"), "health", spec_.worker[0], "--timeout_s=0.5"}, {});
  ASSERT_TRUE(closed.ok());
  exited = (*closed)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 1) << (*closed)->output();
  EXPECT_NE((*closed)->output().find("no answer within"), std::string::npos)
      << (*closed)->output();
}

TEST_F(PsServerTest, Sigterm_DrainsAndExitsZero) {
  proto::HealthRequest request;
  proto::HealthResponse health;
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
  ASSERT_TRUE(stub_->Health(&context, request, &health).ok());
  EXPECT_EQ(health.task(), "ps:0");
  EXPECT_NE(health.incarnation(), 0u);
  ps_->Signal(SIGTERM);
  std::optional<int> exited = ps_->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 0) << ps_->output();
}

// `docker-compose up --exit-code-from` and Kubernetes stop every container
// at once, so a SIGTERM can arrive while a daemon is already on its way out,
// after main() has returned; the thread that delivers signals is still
// there then. A stream of them from the first to the exit must not crash it.
TEST_F(PsServerTest, SigtermsUntilItHasExited_ExitZero) {
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
  proto::HealthResponse health;
  ASSERT_TRUE(stub_->Health(&context, proto::HealthRequest(), &health).ok());
  std::atomic<bool> exited{false};
  std::thread signaller([&] {
    // Paced, not a tight loop: a process that spends all its time in the
    // handler makes no progress (it hangs in a sleep that restarts). The
    // exit takes milliseconds, so many signals still land in it.
    while (!exited.load()) {
      ps_->Signal(SIGTERM);  // a no-op once it has exited
      absl::SleepFor(absl::Microseconds(100));
    }
  });
  std::optional<int> status = ps_->WaitForExit(kTimeout);
  exited.store(true);
  signaller.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status)) << "killed by signal " << WTERMSIG(*status) << "\n"
                                  << ps_->output();
  EXPECT_EQ(ExitCode(*status), 0) << ps_->output();
}

// --bind moves where the ps listens; its TF_CONFIG address stays what peers
// are told.
TEST(DaemonConfigTest, Bind_ListensWhereToldNotAtTheTfConfigPort) {
  // Worker 1's port is free (workers do not listen): the ps binds there.
  const LocalSpec spec = PickLocalSpec(0, 1, 2);
  const std::string bind = spec.worker[1];
  auto ps = TestProcess::Start({BinaryPath("ps_server"), "--chief_timeout_s=0", "--bind=" + bind},
                               {"TF_CONFIG=" + TfConfigJson(spec, "ps", 0)});
  ASSERT_TRUE(ps.ok());
  ASSERT_TRUE((*ps)->WaitForOutput("serving on " + bind, kTimeout)) << (*ps)->output();
  for (const auto& [address, want] : {std::pair{bind, 0}, std::pair{spec.ps[0], 1}}) {
    auto health =
        TestProcess::Start({BinaryPath("pstrain"), "health", address, "--timeout_s=1"}, {});
    ASSERT_TRUE(health.ok());
    std::optional<int> exited = (*health)->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value());
    EXPECT_EQ(ExitCode(*exited), want) << address << ": " << (*health)->output();
  }
}

// Each bad TF_CONFIG ends the binary with status 2 and a one-line message,
// before it listens on anything.
TEST(DaemonConfigTest, BadTfConfig_ExitsTwoWithMessage) {
  struct Case {
    std::string binary, tf_config, message_part;
  };
  const std::string ok_cluster = R"("cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]})";
  const std::vector<Case> cases = {
      {"ps_server", "{not json", "TF_CONFIG"},
      {"ps_server", R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "ps"}})",
       "no \"ps\" tasks"},
      {"worker", "{" + ok_cluster + R"(, "task": {"type": "wroker", "index": 0}})",
       "did you mean 'worker'"},
      {"worker", "{" + ok_cluster + R"(, "task": {"type": "worker", "index": 5}})", "out of range"},
      {"ps_server", "{" + ok_cluster + R"(, "task": {"type": "worker", "index": 0}})", "ps"},
      {"chief", "{" + ok_cluster + R"(, "task": {"type": "worker", "index": 0}})", "chief"},
  };
  for (const Case& c : cases) {
    auto process = TestProcess::Start({BinaryPath(c.binary)}, {"TF_CONFIG=" + c.tf_config});
    ASSERT_TRUE(process.ok());
    std::optional<int> exited = (*process)->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value()) << c.tf_config;
    EXPECT_EQ(ExitCode(*exited), 2) << c.tf_config << "\n" << (*process)->output();
    const std::string output = (*process)->output();
    EXPECT_NE(output.find(c.message_part), std::string::npos) << c.tf_config << "\n" << output;
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
    EXPECT_EQ(output.find("serving"), std::string::npos) << output;
  }
}

}  // namespace
}  // namespace pst::testing
