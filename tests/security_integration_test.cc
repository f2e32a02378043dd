// Mutual TLS and token authentication through real daemons: a cluster
// started with a CA, certificates and a token trains; a ps started that way
// refuses plaintext clients, clients without a certificate or with one from
// another CA (the handshake fails), and clients with no token or a wrong
// one (UNAUTHENTICATED), and its parameters are bit-for-bit unchanged by
// their attempts. Certificates are made by the openssl command line, in
// the test's directory; the test skips without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_channel.h"
#include "common/tensor_util.h"
#include "common/transport_security.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

bool Shell(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// A CA and a certificate it signed for 127.0.0.1 and localhost, as
// <dir>/<name>-ca.pem, <name>.pem and <name>.key (EC P-256, two days).
bool MakeCertificates(const std::string& dir, const std::string& name) {
  const std::string p = absl::StrCat(dir, "/", name);
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  {
    std::ofstream ext(p + ".ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    if (!ext) return false;
  }  // closed: openssl reads it below
  return Shell(absl::StrCat("openssl req -x509 ", ec, " -keyout ", p, "-ca.key -out ", p,
                          "-ca.pem -days 2 -subj /CN=", name, "-ca")) &&
         Shell(absl::StrCat("openssl req ", ec, " -keyout ", p, ".key -out ", p,
                          ".csr -subj /CN=", name, "-node")) &&
         Shell(absl::StrCat("openssl x509 -req -in ", p, ".csr -CA ", p, "-ca.pem -CAkey ", p,
                          "-ca.key -CAcreateserial -out ", p, ".pem -days 2 -extfile ", p,
                          ".ext"));
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Shell("command -v openssl")) GTEST_SKIP() << "no openssl command to make certificates";
    dir_ = TestDir();
    ASSERT_TRUE(MakeCertificates(dir_, "cluster"));
    ASSERT_TRUE(MakeCertificates(dir_, "rogue"));
    WriteFile(dir_ + "/token", "s3cret-token\n");
    WriteFile(dir_ + "/wrong-token", "not-the-token\n");
  }

  // The flags every daemon of the secured cluster gets.
  std::vector<std::string> SecureFlags() const {
    return {"--tls_cert=" + dir_ + "/cluster.pem", "--tls_key=" + dir_ + "/cluster.key",
            "--tls_ca=" + dir_ + "/cluster-ca.pem", "--auth_token_file=" + dir_ + "/token"};
  }

  // A client's security: its certificate (name: "cluster", "rogue" or ""),
  // the CA it trusts, and its token file ("" for none).
  common::TransportSecurity Client(const std::string& cert, const std::string& token) const {
    common::SecurityFiles files;
    files.tls_ca = dir_ + "/cluster-ca.pem";
    if (!cert.empty()) {
      files.tls_cert = absl::StrCat(dir_, "/", cert, ".pem");
      files.tls_key = absl::StrCat(dir_, "/", cert, ".key");
    }
    if (!token.empty()) files.auth_token_file = absl::StrCat(dir_, "/", token);
    absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(files);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.value_or(common::TransportSecurity());
  }

  std::string dir_;
};

std::unique_ptr<proto::ParameterServer::Stub> Stub(const std::string& address,
                                                   const common::TransportSecurity& security) {
  grpc::ChannelArguments args;
  return proto::ParameterServer::NewStub(
      grpc::CreateCustomChannel(address, common::MakeChannelCredentials(security), args));
}

grpc::Status Pull(proto::ParameterServer::Stub* stub, proto::PullResponse* response) {
  grpc::ClientContext context;
  common::SetDeadline(&context, absl::Seconds(10));
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
    common::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
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
    common::SetDeadline(&context, absl::Seconds(10));
    proto::PushResponse pushed;
    grpc::Status status = stub->Push(&context, push, &pushed);
    EXPECT_EQ(status.error_code(), intruder.code) << status.error_message();
    grpc::ClientContext create_context;
    common::SetDeadline(&create_context, absl::Seconds(10));
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
  common::SetDeadline(&context, kTimeout);
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
