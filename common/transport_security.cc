#include "common/transport_security.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pst::common {
namespace {

absl::StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFile(flag, path);
  if (pem.ok() && !absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": not a PEM file (no -----BEGIN line)"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<TransportSecurity> LoadTransportSecurity(const SecurityFiles& files) {
  TransportSecurity s;
  if (files.tls_cert.empty() != files.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: a certificate is of no use without its key");
  }
  if (!files.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem("tls_cert", files.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("tls_key", files.tls_key);
    if (!key.ok()) return key.status();
    s.cert_pem = *std::move(cert);
    s.key_pem = *std::move(key);
    s.cert_tasks = TasksInCertificate(s.cert_pem);
  }
  if (!files.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("tls_ca", files.tls_ca);
    if (!ca.ok()) return ca.status();
    s.ca_pem = *std::move(ca);
  }
  if (!files.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadFile("auth_token_file", files.auth_token_file);
    if (!token.ok()) return token.status();
    s.token = std::string(absl::StripAsciiWhitespace(*token));
    if (s.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file=", files.auth_token_file, ": the file is empty"));
    }
    if (!s.tls()) {
      return absl::InvalidArgumentError(
          "--auth_token_file needs TLS (--tls_ca, and --tls_cert/--tls_key on daemons that "
          "serve): a token sent in plaintext can be read by anyone on the network");
    }
  }
  if (!files.role_tokens_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile("role_tokens_file", files.role_tokens_file);
    if (!text.ok()) return text.status();
    absl::StatusOr<RoleTokens> table = RoleTokens::Parse(*text);
    if (!table.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--role_tokens_file=", files.role_tokens_file,
                                                     ": ", table.status().message()));
    }
    if (!s.tls()) {
      return absl::InvalidArgumentError(
          "--role_tokens_file needs TLS (--tls_ca, and --tls_cert/--tls_key on daemons that "
          "serve): tokens sent in plaintext can be read by anyone on the network");
    }
    s.role_tokens = *std::move(table);
  }
  s.server_name = files.tls_server_name;
  return s;
}

std::string DescribeTransportSecurity(const TransportSecurity& security) {
  std::string out = !security.tls()           ? "plaintext"
                    : security.ca_pem.empty() ? "TLS"
                    : security.cert_pem.empty() ? "TLS (no client certificate)"
                                                : "mutual TLS";
  if (!security.token.empty()) out += ", token";
  if (security.token_roles()) {
    out += ", role tokens";
  } else if (security.cert_roles()) {
    out += ", roles";
  } else if (!security.ca_pem.empty() && !security.cert_pem.empty()) {
    out += ", no roles";
  }
  return out;
}

}  // namespace pst::common
