// Certificates and tokens for the security tests, made with the openssl
// command line in a test's directory, the way docs/security.md tells a
// user to make them.
#ifndef PST_TESTS_TEST_SECURITY_H_
#define PST_TESTS_TEST_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "rpc/grpc_channel.h"
#include "rpc/grpc_credentials.h"
#include "common/transport_security.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::testing {

// Whether `command` exits 0 (its output dropped).
bool Shell(const std::string& command);

// Whether the openssl command is here; the tests skip without it.
bool HaveOpenssl();

// A CA and a certificate it signed for 127.0.0.1 and localhost, as
// <dir>/<name>-ca.pem, <name>.pem and <name>.key (EC P-256, two days).
bool MakeCertificates(const std::string& dir, const std::string& name);

// A certificate signed by <dir>/<ca>-ca.pem for 127.0.0.1 and localhost,
// and for `task` ("worker-1": the SAN worker-1.pstrain) unless it is empty,
// as <dir>/<name>.pem and <name>.key.
bool MakeTaskCertificate(const std::string& dir, const std::string& ca, const std::string& name,
                         const std::string& task);

// A random token for each of `tasks` ("chief-0", "worker-1"), as
// <dir>/<task>.token, and the table of their digests the servers take
// (--role_tokens_file), as <dir>/role-tokens.
bool MakeRoleTokens(const std::string& dir, const std::vector<std::string>& tasks);

// A client's security: the CA <dir>/<ca>-ca.pem it trusts, its
// certificate <dir>/<cert>.pem and key ("" for none), and the token file
// <dir>/<token> it sends ("" for none). Fails the test on a bad file.
common::TransportSecurity ClientSecurity(const std::string& dir, const std::string& ca,
                                         const std::string& cert, const std::string& token);

// A stub of `Service` at `address` under `security`.
template <typename Service>
std::unique_ptr<typename Service::Stub> SecureStub(const std::string& address,
                                                   const common::TransportSecurity& security) {
  grpc::ChannelArguments args;
  return Service::NewStub(
      grpc::CreateCustomChannel(address, rpc::MakeChannelCredentials(security), args));
}

// Calls `method` of `stub` with `request` and a 10 s deadline, waiting for
// the server to be ready.
template <typename Stub, typename Request, typename Response>
grpc::Status Call(Stub* stub,
                  grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const Request& request = Request()) {
  grpc::ClientContext context;
  rpc::SetDeadline(&context, absl::Seconds(10), /*wait_for_ready=*/true);
  Response response;
  return (stub->*method)(&context, request, &response);
}

// What a caller that is not the chief gets from a ps: the status of each
// management call (Shutdown, Save, Restore, SetMembership,
// CreateVariables, SetRoles) and of a push as worker 0, by name.
std::vector<std::pair<std::string, grpc::Status>> ManagementCallsBy(
    proto::ParameterServer::Stub* stub);

// Expects `worker` (worker 1's credentials) refused CreateVariables of "w"
// for want of the chief's role, and `chief` to create it.
void ExpectOnlyTheChiefCreates(proto::ParameterServer::Stub* worker,
                               proto::ParameterServer::Stub* chief);

class TestProcess;

// Expects `chief`'s Shutdown of the ps `ps` to be taken, and the ps to exit 0.
void ExpectTheChiefShutsItDown(proto::ParameterServer::Stub* chief, TestProcess* ps);

}  // namespace pst::testing

#endif  // PST_TESTS_TEST_SECURITY_H_
