// Mutual TLS and token authentication through real daemons: a cluster
// started with a CA, certificates and a token trains; a ps started that way
// refuses plaintext clients, clients without a certificate or with one from
// another CA (the handshake fails), and clients with no token or a wrong
// one (UNAUTHENTICATED), and its parameters are bit-for-bit unchanged by
// their attempts. With one certificate per task (chief-0.pstrain, ...), a
// worker's certificate cannot manage the ps nor act for another worker, a
// task-less one can do nothing, and a whole job trains. Certificates are
// made by the openssl command line, in
// the test's directory; the test skips without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rpc/grpc_channel.h"
#include "common/tensor_util.h"
#include "rpc/grpc_credentials.h"
#include "common/transport_security.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_requests.h"
#include "tests/test_security.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveOpenssl()) GTEST_SKIP() << "no openssl command to make certificates";
    dir_ = TestDir();
    ASSERT_TRUE(MakeCertificates(dir_, "cluster"));
    ASSERT_TRUE(MakeCertificates(dir_, "rogue"));
    // Per-role certificates from the cluster's CA; "foreign" names no task.
    for (const char* task : {"chief-0", "ps-0", "worker-0", "worker-1"}) {
      ASSERT_TRUE(MakeTaskCertificate(dir_, "cluster", task, task));
    }
    ASSERT_TRUE(MakeTaskCertificate(dir_, "cluster", "foreign", ""));
    WriteFile(dir_ + "/token", "s3cret-token\n");
    WriteFile(dir_ + "/wrong-token", "not-the-token\n");
  }

  // The flags every daemon of the secured cluster gets.
  std::vector<std::string> SecureFlags() const {
    return {"--tls_cert=" + dir_ + "/cluster.pem", "--tls_key=" + dir_ + "/cluster.key",
            "--tls_ca=" + dir_ + "/cluster-ca.pem", "--auth_token_file=" + dir_ + "/token"};
  }

  // A client's security: its certificate (name: "cluster", "rogue" or ""),
  // the cluster's CA, and its token file ("" for none).
  common::TransportSecurity Client(const std::string& cert, const std::string& token) const {
    return ClientSecurity(dir_, "cluster", cert, token);
  }

  // The flags of a daemon with the per-role certificate `name`.
  std::vector<std::string> RoleFlags(const std::string& name) const {
    return {"--tls_cert=" + dir_ + "/" + name + ".pem", "--tls_key=" + dir_ + "/" + name + ".key",
            "--tls_ca=" + dir_ + "/cluster-ca.pem"};
  }

  std::string dir_;
};

std::unique_ptr<proto::ParameterServer::Stub> Stub(const std::string& address,
                                                   const common::TransportSecurity& security) {
  grpc::ChannelArguments args;
  return proto::ParameterServer::NewStub(
      grpc::CreateCustomChannel(address, rpc::MakeChannelCredentials(security), args));
}

grpc::Status Pull(proto::ParameterServer::Stub* stub, proto::PullResponse* response) {
  grpc::ClientContext context;
  rpc::SetDeadline(&context, absl::Seconds(10));
  return stub->Pull(&context, proto::PullRequest(), response);
}

TEST_F(SecurityTest, ClusterWithMutualTlsAndToken_Trains) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is missing";
  const std::string summary = dir_ + "/summary.json";
  std::vector<std::string> flags = {"--ps=2", "--workers=2", "--epochs=1", "--max_steps=400",
                                    "--summary_json=" + summary};
  for (const std::string& f : SecureFlags()) flags.push_back(f);
  auto launcher = LaunchLocal(flags);
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(absl::Seconds(240));
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << launcher->output();
  EXPECT_TRUE(absl::StrContains(launcher->output(), "mutual TLS, token")) << launcher->output();
  const nlohmann::json result = ReadJsonFile(summary);
  ASSERT_TRUE(result.is_object()) << launcher->output();
  EXPECT_GE(result["test_accuracy"].get<double>(), 0.70) << result.dump();
}

TEST_F(SecurityTest, BadFlags_ExitTwoNamingTheProblem) {
  const LocalSpec spec = PickLocalSpec(1, 1, 1);
  const std::string tf = "TF_CONFIG=" + TfConfigJson(spec, "ps", 0);
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  } cases[] = {
      {{"--tls_cert=" + dir_ + "/cluster.pem"}, "--tls_cert and --tls_key go together"},
      {{"--tls_ca=" + dir_ + "/nope.pem"}, "--tls_ca=" + dir_ + "/nope.pem: cannot read"},
      {{"--tls_ca=" + dir_ + "/token"}, "not a PEM file"},
      {{"--auth_token_file=" + dir_ + "/token"}, "--auth_token_file needs TLS"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BinaryPath("ps_server")};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    auto ps = TestProcess::Start(argv, {tf});
    ASSERT_TRUE(ps.ok());
    std::optional<int> exited = (*ps)->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value());
    EXPECT_EQ(ExitCode(*exited), 2) << (*ps)->output();
    EXPECT_TRUE(absl::StrContains((*ps)->output(), c.message)) << (*ps)->output();
  }
}

TEST_F(SecurityTest, Intruders_AreRefused_AndTheParametersStayUnchanged) {
  const LocalSpec spec = PickLocalSpec(1, 1, 1);
  std::vector<std::string> argv = {BinaryPath("ps_server")};
  for (const std::string& f : SecureFlags()) argv.push_back(f);
  auto started = TestProcess::Start(argv, {"TF_CONFIG=" + TfConfigJson(spec, "ps", 0)});
  ASSERT_TRUE(started.ok());
  std::unique_ptr<TestProcess> ps = *std::move(started);
  const std::string address = spec.ps[0];

  // The cluster's own client creates a variable and reads it.
  auto good = Stub(address, Client("cluster", "token"));
  proto::CreateVariablesRequest create;
  proto::VariableSpec* w = create.add_variables();
  w->set_name("w");
  w->set_dtype(proto::DT_FLOAT32);
  w->add_shape(4);
  w->mutable_initializer()->set_kind(proto::Initializer::NORMAL);
  w->mutable_initializer()->set_scale(0.1f);
  w->mutable_initializer()->set_seed(7);
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    proto::CreateVariablesResponse response;
    grpc::Status created = good->CreateVariables(&context, create, &response);
    ASSERT_TRUE(created.ok()) << created.error_message() << "\n" << ps->output();
  }
  proto::PullResponse before;
  ASSERT_TRUE(Pull(good.get(), &before).ok());

  // Each intruder pushes a gradient and tries to replace the variables.
  proto::PushRequest push;
  push.add_names("w");
  common::Shape shape;
  shape.Add(4);
  const std::vector<float> ones = {1, 1, 1, 1};
  common::PackFloats(ones, shape, push.add_gradients());
  struct Intruder {
    std::string what;
    common::TransportSecurity security;
    grpc::StatusCode code;
  };
  std::vector<Intruder> intruders = {
      {"plaintext", common::TransportSecurity(), grpc::StatusCode::UNAVAILABLE},
      {"TLS without a client certificate", Client("", "token"), grpc::StatusCode::UNAVAILABLE},
      {"a certificate from another CA", Client("rogue", "token"), grpc::StatusCode::UNAVAILABLE},
      {"the cluster's certificate, no token", Client("cluster", ""),
       grpc::StatusCode::UNAUTHENTICATED},
      {"the cluster's certificate, a wrong token", Client("cluster", "wrong-token"),
       grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const Intruder& intruder : intruders) {
    SCOPED_TRACE(intruder.what);
    auto stub = Stub(address, intruder.security);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(10));
    proto::PushResponse pushed;
    grpc::Status status = stub->Push(&context, push, &pushed);
    EXPECT_EQ(status.error_code(), intruder.code) << status.error_message();
    grpc::ClientContext create_context;
    rpc::SetDeadline(&create_context, absl::Seconds(10));
    proto::CreateVariablesResponse created;
    status = stub->CreateVariables(&create_context, create, &created);
    EXPECT_EQ(status.error_code(), intruder.code) << status.error_message();
    proto::PullResponse read;
    EXPECT_EQ(Pull(stub.get(), &read).error_code(), intruder.code);
  }

  proto::PullResponse after;
  ASSERT_TRUE(Pull(good.get(), &after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString())
      << "an intruder changed the parameters";

  // The ps still serves its own: a good push moves w by -1 (SGD, rate 1).
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout);
  proto::PushResponse pushed;
  ASSERT_TRUE(good->Push(&context, push, &pushed).ok());
  ASSERT_TRUE(Pull(good.get(), &after).ok());
  EXPECT_NE(after.SerializeAsString(), before.SerializeAsString());

  // pstrain health needs the same credentials.
  std::vector<std::string> health = {BinaryPath("pstrain"), "health", address, "--timeout_s=5"};
  auto plain = TestProcess::Start(health);
  ASSERT_TRUE(plain.ok());
  std::optional<int> exited = (*plain)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 1) << (*plain)->output();
  for (const std::string& f : SecureFlags()) health.push_back(f);
  auto secure = TestProcess::Start(health);
  ASSERT_TRUE(secure.ok());
  exited = (*secure)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 0) << (*secure)->output();
}

}  // namespace
}  // namespace pst::testing

namespace pst::testing {
namespace {

// Per-role certificates: a worker's certificate cannot manage the ps
// (create, save, restore, change membership, shut down) nor push as another
// worker; a certificate from the cluster's CA that names no task can do
// nothing; the chief's can, and the ps serves on through the refusals.
TEST_F(SecurityTest, RoleCertificates_PsTakesManagementOnlyFromTheChief) {
  const LocalSpec spec = PickLocalSpec(1, 1, 2);
  std::vector<std::string> argv = {BinaryPath("ps_server")};
  for (const std::string& f : RoleFlags("ps-0")) argv.push_back(f);
  auto started = TestProcess::Start(argv, {"TF_CONFIG=" + TfConfigJson(spec, "ps", 0)});
  ASSERT_TRUE(started.ok());
  std::unique_ptr<TestProcess> ps = *std::move(started);
  const std::string address = spec.ps[0];
  ASSERT_TRUE(ps->WaitForOutput("mutual TLS, roles", kTimeout)) << ps->output();

  using Ps = proto::ParameterServer;
  auto chief = SecureStub<Ps>(address, Client("chief-0", ""));
  auto worker = SecureStub<Ps>(address, Client("worker-1", ""));
  auto foreign = SecureStub<Ps>(address, Client("foreign", ""));

  ExpectOnlyTheChiefCreates(worker.get(), chief.get());
  for (auto* stub : {worker.get(), foreign.get()}) {
    for (const auto& [what, status] : ManagementCallsBy(stub)) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << what << ": " << status.error_message();
    }
  }
  proto::PullResponse read;
  grpc::Status status = Pull(foreign.get(), &read);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "names no pstrain task"))
      << status.error_message();

  // The ps serves on: worker 1 pushes as itself and reads; the chief reads,
  // and its management calls pass the role check (this ps has no
  // --checkpoint_dir, so a save fails on that instead).
  proto::PullResponse before;
  ASSERT_TRUE(Pull(chief.get(), &before).ok());
  status = Call(worker.get(), &Ps::Stub::Push, OnesPush(1));
  EXPECT_TRUE(status.ok()) << status.error_message();
  proto::PullRequest as_worker_1;
  as_worker_1.set_worker_index(1);
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(10));
    proto::PullResponse after;
    status = worker->Pull(&context, as_worker_1, &after);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_NE(after.SerializeAsString(), before.SerializeAsString());
  }
  proto::PullRequest as_worker_0;  // worker_index 0
  EXPECT_EQ(Call(worker.get(), &Ps::Stub::Pull, as_worker_0).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  proto::SaveRequest save;
  save.set_checkpoint("ckpt-1");
  save.set_num_ps(1);
  status = Call(chief.get(), &Ps::Stub::Save, save);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_TRUE(
      Call(chief.get(), &Ps::Stub::SetMembership, proto::MembershipRequest()).error_code() !=
      grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(ps->WaitForOutput("refused a shutdown", kTimeout)) << ps->output();

  ExpectTheChiefShutsItDown(chief.get(), ps.get());
}

// A whole job with one certificate per task trains and finishes; while it
// runs, the chief's coordinator refuses a worker acting for another worker
// and a certificate that names no task.
TEST_F(SecurityTest, RoleCertificates_JobTrains_AndWorkersActOnlyAsThemselves) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is missing";
  const LocalSpec spec = PickLocalSpec(1, 1, 2);
  const std::vector<std::string> flags = {"--epochs=1", "--max_steps=300", "--heartbeat_ms=200"};
  auto start = [&](const std::string& binary, const std::string& type, int index) {
    std::vector<std::string> argv = {BinaryPath(binary)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const std::string& f : RoleFlags(absl::StrCat(type, "-", index))) argv.push_back(f);
    auto process = TestProcess::Start(argv, {"TF_CONFIG=" + TfConfigJson(spec, type, index)});
    EXPECT_TRUE(process.ok()) << process.status();
    return process.ok() ? *std::move(process) : nullptr;
  };
  auto ps = start("ps_server", "ps", 0);
  auto chief = start("chief", "chief", 0);
  ASSERT_TRUE(ps && chief);
  ASSERT_TRUE(chief->WaitForOutput("coordinator serving on", kTimeout)) << chief->output();

  using Coordinator = proto::Coordinator;
  for (const std::string& cert : {std::string("worker-1"), std::string("foreign")}) {
    SCOPED_TRACE(cert);
    auto stub = SecureStub<Coordinator>(spec.chief[0], Client(cert, ""));
    proto::RegisterRequest done;
    done.set_worker_index(0);
    done.set_finished(true);
    grpc::Status status = Call(stub.get(), &Coordinator::Stub::Register, done);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), "worker-0.pstrain"))
        << status.error_message();
    proto::HeartbeatRequest beat;
    beat.set_worker_index(0);
    status = Call(stub.get(), &Coordinator::Stub::Heartbeat, beat);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    proto::WorkerDoneRequest left;
    left.mutable_final_progress()->set_worker_index(0);
    status = Call(stub.get(), &Coordinator::Stub::WorkerDone, left);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    proto::ClaimWorkerIndexRequest claim;
    claim.set_claimant("intruder");
    status = Call(stub.get(), &Coordinator::Stub::ClaimWorkerIndex, claim);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  auto foreign = SecureStub<Coordinator>(spec.chief[0], Client("foreign", ""));
  EXPECT_EQ(Call(foreign.get(), &Coordinator::Stub::GetState).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  auto worker0 = start("worker", "worker", 0);
  auto worker1 = start("worker", "worker", 1);
  ASSERT_TRUE(worker0 && worker1);
  std::optional<int> chief_exit = chief->WaitForExit(absl::Seconds(240));
  ASSERT_TRUE(chief_exit.has_value()) << chief->output();
  EXPECT_EQ(ExitCode(*chief_exit), 0) << chief->output();
  EXPECT_TRUE(absl::StrContains(chief->output(), "workers 2/2 done")) << chief->output();
  for (TestProcess* process : {worker0.get(), worker1.get(), ps.get()}) {
    std::optional<int> exited = process->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value()) << process->output();
    EXPECT_EQ(ExitCode(*exited), 0) << process->output();
  }
}

// Worker 0 of a chief-less cluster acts as chief: under per-role
// certificates its certificate must name chief-0 too, or it refuses to
// start rather than be refused by the ps.
TEST_F(SecurityTest, RoleCertificates_WorkerZeroAsChiefWithoutChiefName_ExitsTwo) {
  const LocalSpec spec = PickLocalSpec(0, 1, 1);
  std::vector<std::string> argv = {BinaryPath("worker")};
  for (const std::string& f : RoleFlags("worker-0")) argv.push_back(f);
  auto worker = TestProcess::Start(argv, {"TF_CONFIG=" + TfConfigJson(spec, "worker", 0)});
  ASSERT_TRUE(worker.ok());
  std::optional<int> exited = (*worker)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value()) << (*worker)->output();
  EXPECT_EQ(ExitCode(*exited), 2) << (*worker)->output();
  EXPECT_TRUE(absl::StrContains((*worker)->output(), "does not name chief-0.pstrain"))
      << (*worker)->output();
}

}  // namespace
}  // namespace pst::testing
