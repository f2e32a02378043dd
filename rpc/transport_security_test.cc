// Loading the TLS and token settings: what is accepted, and the errors that
// name the flag. security_integration_test checks the credentials through
// real daemons.
#include "rpc/grpc_credentials.h"
#include "common/transport_security.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pst::rpc {
namespace {

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

class TransportSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/transport_security_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }
  std::string dir_;
};

TEST_F(TransportSecurityTest, NothingGiven_IsPlaintext) {
  absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(common::SecurityFiles());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->tls());
  EXPECT_EQ(common::DescribeTransportSecurity(*s), "plaintext");
  EXPECT_TRUE(MakeServerCredentials(*s).ok());
}

TEST_F(TransportSecurityTest, CertKeyCaAndToken_MutualTlsWithTheTokenTrimmed) {
  common::SecurityFiles files;
  files.tls_cert = Write("c.pem", kPem);
  files.tls_key = Write("k.pem", kPem);
  files.tls_ca = Write("ca.pem", kPem);
  files.auth_token_file = Write("token", "  abc def \n");
  absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(files);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->token, "abc def");
  EXPECT_EQ(common::DescribeTransportSecurity(*s), "mutual TLS, token, no roles");
  EXPECT_FALSE(s->roles());
  files.tls_ca.clear();
  files.auth_token_file.clear();
  EXPECT_EQ(common::DescribeTransportSecurity(*common::LoadTransportSecurity(files)), "TLS");
}

TEST_F(TransportSecurityTest, BadSettings_NameTheFlag) {
  struct Case {
    common::SecurityFiles files;
    absl::StatusCode code;
    std::string message;
  };
  const std::string pem = Write("c.pem", kPem);
  const std::string text = Write("t.txt", "not pem");
  const std::string empty = Write("empty", " \n");
  std::vector<Case> cases;
  common::SecurityFiles f;
  f.tls_cert = pem;
  cases.push_back({f, absl::StatusCode::kInvalidArgument, "--tls_cert and --tls_key go together"});
  f = common::SecurityFiles();
  f.tls_key = pem;
  cases.push_back({f, absl::StatusCode::kInvalidArgument, "--tls_cert and --tls_key go together"});
  f = common::SecurityFiles();
  f.tls_ca = dir_ + "/missing.pem";
  cases.push_back({f, absl::StatusCode::kNotFound, "--tls_ca=" + dir_ + "/missing.pem"});
  f = common::SecurityFiles();
  f.tls_cert = text;
  f.tls_key = pem;
  cases.push_back({f, absl::StatusCode::kInvalidArgument, "--tls_cert=" + text + ": not a PEM"});
  f = common::SecurityFiles();
  f.tls_ca = pem;
  f.auth_token_file = empty;
  cases.push_back({f, absl::StatusCode::kInvalidArgument, "the file is empty"});
  f = common::SecurityFiles();
  f.auth_token_file = text;
  cases.push_back({f, absl::StatusCode::kInvalidArgument, "--auth_token_file needs TLS"});
  const std::string table = Write("roles", std::string(64, 'a') + " worker-0.pstrain\n");
  f = common::SecurityFiles();
  f.role_tokens_file = table;
  cases.push_back({f, absl::StatusCode::kInvalidArgument, "--role_tokens_file needs TLS"});
  f = common::SecurityFiles();
  f.tls_ca = pem;
  f.role_tokens_file = Write("bad-roles", std::string(64, 'a') + " worker-0\n");
  cases.push_back({f, absl::StatusCode::kInvalidArgument,
                   "--role_tokens_file=" + f.role_tokens_file + ": line 1: 'worker-0' is not"});
  f.role_tokens_file = dir_ + "/missing-roles";
  cases.push_back({f, absl::StatusCode::kNotFound, "--role_tokens_file=" + dir_});
  for (const Case& c : cases) {
    absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(c.files);
    EXPECT_EQ(s.status().code(), c.code) << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.message)) << s.status();
  }
}

TEST_F(TransportSecurityTest, RoleTokens_RolesComeFromTokensNotCertificates) {
  common::SecurityFiles files;
  files.tls_cert = Write("c.pem", kPem);
  files.tls_key = Write("k.pem", kPem);
  files.tls_ca = Write("ca.pem", kPem);
  files.auth_token_file = Write("token", "mine\n");
  files.role_tokens_file = Write("roles", std::string(64, 'b') + " ps-0.pstrain\n");
  absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(files);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->roles());
  EXPECT_TRUE(s->token_roles());
  EXPECT_FALSE(s->cert_roles());
  EXPECT_EQ(common::DescribeTransportSecurity(*s), "mutual TLS, token, role tokens");
  EXPECT_TRUE(MakeServerCredentials(*s).ok());
}

TEST_F(TransportSecurityTest, CaWithoutCertificate_ClientOnly_ServerRefusesToStart) {
  common::SecurityFiles files;
  files.tls_ca = Write("ca.pem", kPem);
  absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(files);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(common::DescribeTransportSecurity(*s), "TLS (no client certificate)");
  EXPECT_NE(MakeChannelCredentials(*s), nullptr);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server = MakeServerCredentials(*s);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--tls_cert")) << server.status();
}

}  // namespace
}  // namespace pst::rpc
