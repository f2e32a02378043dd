// The gRPC side of common::TransportSecurity: channel and server credentials, the
// token every call carries, and the servers' checks of it.
#include "rpc/grpc_credentials.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pst::rpc {
namespace {

constexpr char kAuthHeader[] = "authorization";
constexpr char kBearer[] = "Bearer ";

// Equal strings in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Adds the token to every call of a channel.
class TokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit TokenPlugin(std::string token) : header_(absl::StrCat(kBearer, token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                           std::multimap<grpc::string, grpc::string>* metadata) override {
    metadata->emplace(kAuthHeader, header_);
    return grpc::Status::OK;
  }

 private:
  const std::string header_;
};

// Refuses every call that does not carry the token, before any handler runs.
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::string token) : expected_(absl::StrCat(kBearer, token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext*,
                       OutputMetadata* consumed, OutputMetadata*) override {
    auto it = auth_metadata.find(kAuthHeader);
    if (it == auth_metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this cluster needs an auth token (--auth_token_file); none was sent");
    }
    const absl::string_view got(it->second.data(), it->second.size());
    if (!ConstantTimeEquals(got, expected_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong auth token");
    }
    consumed->emplace(kAuthHeader, std::string(got));
    return grpc::Status::OK;
  }

 private:
  const std::string expected_;
};

// Admits only calls whose token is in the table of role tokens, and records
// the tasks it speaks for in the call's auth context (common::kTokenTaskProperty),
// where CallerOf finds them. The table holds digests: a lookup's time says
// nothing of the tokens in it.
class RoleTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit RoleTokenProcessor(common::RoleTokens tokens) : tokens_(std::move(tokens)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata*) override {
    auto it = auth_metadata.find(kAuthHeader);
    if (it == auth_metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this cluster gives each task a token of its own (--auth_token_file); "
                          "none was sent");
    }
    absl::string_view got(it->second.data(), it->second.size());
    const std::vector<common::TaskIdentity>* tasks = nullptr;
    if (absl::ConsumePrefix(&got, kBearer)) tasks = &tokens_.TasksOf(got);
    if (tasks == nullptr || tasks->empty()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the token sent is not one of this cluster's role tokens "
                          "(--role_tokens_file)");
    }
    for (const common::TaskIdentity& task : *tasks) {
      context->AddProperty(common::kTokenTaskProperty, common::TaskName(task));
    }
    consumed->emplace(kAuthHeader, std::string(it->second.data(), it->second.size()));
    return grpc::Status::OK;
  }

 private:
  const common::RoleTokens tokens_;
};

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const common::TransportSecurity& security) {
  if (!security.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.ca_pem;  // empty: the system's roots
  options.pem_private_key = security.key_pem;
  options.pem_cert_chain = security.cert_pem;
  std::shared_ptr<grpc::ChannelCredentials> tls = grpc::SslCredentials(options);
  if (security.token.empty()) return tls;
  return grpc::CompositeChannelCredentials(
      tls, grpc::MetadataCredentialsFromPlugin(std::make_unique<TokenPlugin>(security.token)));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const common::TransportSecurity& security) {
  if (!security.tls()) return grpc::InsecureServerCredentials();
  if (security.cert_pem.empty()) {
    return absl::FailedPreconditionError(
        "TLS is on (--tls_ca) but this daemon has no certificate to serve with: add --tls_cert "
        "and --tls_key");
  }
  grpc::SslServerCredentialsOptions options(
      security.ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.ca_pem;
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  if (security.token_roles()) {
    credentials->SetAuthMetadataProcessor(
        std::make_shared<RoleTokenProcessor>(security.role_tokens));
  } else if (!security.token.empty()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(security.token));
  }
  return credentials;
}

}  // namespace pst::rpc
