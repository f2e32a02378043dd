// Per-role tokens through real daemons: every daemon shares one certificate
// that names no task, and each task sends a token of its own
// (--auth_token_file) that the servers' table (--role_tokens_file) maps to
// its task. A worker's token cannot manage the ps nor act for another
// worker, a ps's token can do nothing, a token not in the table and no
// token are UNAUTHENTICATED, the ps serves on through the refusals, and a
// whole job started by `pstrain local` with "{task}" token files trains.
// Tokens and certificates are made with the openssl command line, as
// docs/security.md shows; the test skips without it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_requests.h"
#include "tests/test_security.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);
using Ps = proto::ParameterServer;

class RoleTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveOpenssl()) GTEST_SKIP() << "no openssl command to make certificates";
    dir_ = TestDir();
    ASSERT_TRUE(MakeCertificates(dir_, "cluster"));
    ASSERT_TRUE(MakeRoleTokens(dir_, {"chief-0", "ps-0", "ps-1", "worker-0", "worker-1"}));
    std::ofstream(dir_ + "/stranger.token") << "a-token-the-table-does-not-list\n";
  }

  // The flags every daemon gets but its token.
  std::vector<std::string> ClusterFlags() const {
    return {"--tls_cert=" + dir_ + "/cluster.pem", "--tls_key=" + dir_ + "/cluster.key",
            "--tls_ca=" + dir_ + "/cluster-ca.pem", "--role_tokens_file=" + dir_ + "/role-tokens"};
  }

  // A client with the cluster's certificate and the token file `token`.
  std::unique_ptr<Ps::Stub> PsStub(const std::string& address, const std::string& token) const {
    return SecureStub<Ps>(address, ClientSecurity(dir_, "cluster", "cluster", token));
  }

  std::string dir_;
};

TEST_F(RoleTokensTest, PsTakesManagementOnlyFromTheChiefsToken) {
  const LocalSpec spec = PickLocalSpec(1, 1, 2);
  std::vector<std::string> argv = {BinaryPath("ps_server"),
                                   "--auth_token_file=" + dir_ + "/ps-0.token"};
  for (const std::string& f : ClusterFlags()) argv.push_back(f);
  auto started = TestProcess::Start(argv, {"TF_CONFIG=" + TfConfigJson(spec, "ps", 0)});
  ASSERT_TRUE(started.ok());
  std::unique_ptr<TestProcess> ps = *std::move(started);
  const std::string address = spec.ps[0];
  ASSERT_TRUE(ps->WaitForOutput("mutual TLS, token, role tokens", kTimeout)) << ps->output();

  auto chief = PsStub(address, "chief-0.token");
  auto worker = PsStub(address, "worker-1.token");
  auto other_ps = PsStub(address, "ps-1.token");
  auto stranger = PsStub(address, "stranger.token");
  auto tokenless = PsStub(address, "");

  ExpectOnlyTheChiefCreates(worker.get(), chief.get());
  proto::PullResponse before;
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(10));
    ASSERT_TRUE(chief->Pull(&context, proto::PullRequest(), &before).ok());
  }

  // A worker and a ps are known and refused for their role; a stranger's
  // token and none are not let in.
  const struct {
    std::string who;
    Ps::Stub* stub;
    grpc::StatusCode code;
  } callers[] = {
      {"worker 1", worker.get(), grpc::StatusCode::PERMISSION_DENIED},
      {"ps 1", other_ps.get(), grpc::StatusCode::PERMISSION_DENIED},
      {"a stranger's token", stranger.get(), grpc::StatusCode::UNAUTHENTICATED},
      {"no token", tokenless.get(), grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& caller : callers) {
    for (const auto& [what, status] : ManagementCallsBy(caller.stub)) {
      EXPECT_EQ(status.error_code(), caller.code)
          << caller.who << ", " << what << ": " << status.error_message();
    }
  }
  // Replicate is a ps's call (a primary forwarding to its backup): a worker
  // is refused; another ps passes the role check (and is refused for
  // holding no such copy).
  grpc::Status replicate = Call(worker.get(), &Ps::Stub::Replicate, proto::ReplicateRequest());
  EXPECT_EQ(replicate.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << replicate.error_message();
  replicate = Call(other_ps.get(), &Ps::Stub::Replicate, proto::ReplicateRequest());
  EXPECT_EQ(replicate.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << replicate.error_message();
  grpc::Status status = Call(stranger.get(), &Ps::Stub::Pull, proto::PullRequest());
  EXPECT_TRUE(absl::StrContains(status.error_message(), "not one of this cluster's"))
      << status.error_message();

  // Nothing moved; worker 1 pushes as itself, and the ps serves on.
  proto::PullResponse after;
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(10));
    ASSERT_TRUE(chief->Pull(&context, proto::PullRequest(), &after).ok());
  }
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  status = Call(worker.get(), &Ps::Stub::Push, OnesPush(1));
  EXPECT_TRUE(status.ok()) << status.error_message();
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, absl::Seconds(10));
    ASSERT_TRUE(chief->Pull(&context, proto::PullRequest(), &after).ok());
  }
  EXPECT_NE(after.SerializeAsString(), before.SerializeAsString());

  ExpectTheChiefShutsItDown(chief.get(), ps.get());
}

// `pstrain local` gives each daemon its own token ("{task}" in the flag).
TEST_F(RoleTokensTest, LocalJobWithATokenPerTask_Trains) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is missing";
  const std::string summary = dir_ + "/summary.json";
  std::vector<std::string> flags = {"--ps=2",
                                    "--workers=2",
                                    "--epochs=1",
                                    "--max_steps=300",
                                    "--summary_json=" + summary,
                                    "--auth_token_file=" + dir_ + "/{task}.token"};
  for (const std::string& f : ClusterFlags()) flags.push_back(f);
  auto launcher = LaunchLocal(flags);
  ASSERT_NE(launcher, nullptr);
  std::optional<int> exited = launcher->WaitForExit(absl::Seconds(240));
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << launcher->output();
  EXPECT_TRUE(absl::StrContains(launcher->output(), "role tokens")) << launcher->output();
  const nlohmann::json result = ReadJsonFile(summary);
  ASSERT_TRUE(result.is_object()) << launcher->output();
  EXPECT_GE(result["global_step"].get<int64_t>(), 300) << result.dump();
}

}  // namespace
}  // namespace pst::testing
