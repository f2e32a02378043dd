#include "tests/test_security.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_requests.h"

namespace pst::testing {

bool Shell(const std::string& command) {
  return std::system(("( " + command + " ) >/dev/null 2>&1").c_str()) == 0;
}

bool HaveOpenssl() { return Shell("command -v openssl"); }

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

bool MakeTaskCertificate(const std::string& dir, const std::string& ca, const std::string& name,
                         const std::string& task) {
  const std::string p = absl::StrCat(dir, "/", name);
  const std::string c = absl::StrCat(dir, "/", ca);
  {
    std::ofstream ext(p + ".ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:localhost"
        << (task.empty() ? "" : absl::StrCat(",DNS:", task, ".pstrain")) << "\n";
    if (!ext) return false;
  }
  return Shell(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes",
                            " -keyout ", p, ".key -out ", p, ".csr -subj /CN=", name)) &&
         Shell(absl::StrCat("openssl x509 -req -in ", p, ".csr -CA ", c, "-ca.pem -CAkey ", c,
                            "-ca.key -CAcreateserial -out ", p, ".pem -days 2 -extfile ", p,
                            ".ext"));
}

bool MakeRoleTokens(const std::string& dir, const std::vector<std::string>& tasks) {
  // The commands docs/security.md gives.
  for (const std::string& task : tasks) {
    const std::string token = absl::StrCat(dir, "/", task, ".token");
    if (!Shell(absl::StrCat("cd ", dir, " && umask 077 && openssl rand -hex 32 | tr -d '\\n' > ",
                            token, " && echo \"$(openssl dgst -sha256 -r < ", token,
                            " | cut -c1-64) ", task, ".pstrain\" >> role-tokens"))) {
      return false;
    }
  }
  return true;
}

common::TransportSecurity ClientSecurity(const std::string& dir, const std::string& ca,
                                         const std::string& cert, const std::string& token) {
  common::SecurityFiles files;
  files.tls_ca = absl::StrCat(dir, "/", ca, "-ca.pem");
  if (!cert.empty()) {
    files.tls_cert = absl::StrCat(dir, "/", cert, ".pem");
    files.tls_key = absl::StrCat(dir, "/", cert, ".key");
  }
  if (!token.empty()) files.auth_token_file = absl::StrCat(dir, "/", token);
  absl::StatusOr<common::TransportSecurity> s = common::LoadTransportSecurity(files);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.value_or(common::TransportSecurity());
}

std::vector<std::pair<std::string, grpc::Status>> ManagementCallsBy(
    proto::ParameterServer::Stub* stub) {
  using Ps = proto::ParameterServer;
  proto::SaveRequest save;
  save.set_checkpoint("ckpt-1");
  save.set_num_ps(1);
  proto::RestoreRequest restore;
  restore.set_checkpoint("ckpt-1");
  proto::ShutdownRequest shutdown;
  shutdown.set_reason("not the chief");
  return {
      {"Shutdown", Call(stub, &Ps::Stub::Shutdown, shutdown)},
      {"Save", Call(stub, &Ps::Stub::Save, save)},
      {"Restore", Call(stub, &Ps::Stub::Restore, restore)},
      {"SetMembership", Call(stub, &Ps::Stub::SetMembership, proto::MembershipRequest())},
      {"CreateVariables", Call(stub, &Ps::Stub::CreateVariables, CreateW())},
      {"SetRoles", Call(stub, &Ps::Stub::SetRoles, proto::RolesRequest())},
      {"Push as worker 0", Call(stub, &Ps::Stub::Push, OnesPush(0))},
  };
}

void ExpectOnlyTheChiefCreates(proto::ParameterServer::Stub* worker,
                               proto::ParameterServer::Stub* chief) {
  using Ps = proto::ParameterServer;
  grpc::Status status = Call(worker, &Ps::Stub::CreateVariables, CreateW());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "needs the chief's role"))
      << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "worker-1.pstrain"))
      << status.error_message();
  status = Call(chief, &Ps::Stub::CreateVariables, CreateW());
  ASSERT_TRUE(status.ok()) << status.error_message();
}

void ExpectTheChiefShutsItDown(proto::ParameterServer::Stub* chief, TestProcess* ps) {
  proto::ShutdownRequest shutdown;
  shutdown.set_reason("the test is done");
  const grpc::Status status = Call(chief, &proto::ParameterServer::Stub::Shutdown, shutdown);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::optional<int> exited = ps->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(exited.has_value()) << ps->output();
  EXPECT_EQ(ExitCode(*exited), 0) << ps->output();
}

}  // namespace pst::testing
