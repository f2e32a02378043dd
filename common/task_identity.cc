#include "common/task_identity.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pst::common {

std::string TaskName(const TaskIdentity& task) {
  return absl::StrCat(std::string(TaskTypeName(task.type)), "-", task.index, kTaskNameSuffix);
}

std::optional<TaskIdentity> ParseTaskName(absl::string_view name) {
  if (!absl::ConsumeSuffix(&name, kTaskNameSuffix)) return std::nullopt;
  const size_t dash = name.rfind('-');
  if (dash == absl::string_view::npos) return std::nullopt;
  const absl::string_view type_name = name.substr(0, dash);
  const absl::string_view digits = name.substr(dash + 1);
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) {
    return std::nullopt;
  }
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const std::string_view type_std(type_name.data(), type_name.size());
  absl::StatusOr<TaskType> type = ParseTaskType(type_std);
  if (!type.ok() || TaskTypeName(*type) != type_std) return std::nullopt;
  TaskIdentity task;
  task.type = *type;
  if (!absl::SimpleAtoi(digits, &task.index)) return std::nullopt;
  return task;
}

std::vector<TaskIdentity> TasksAmong(const std::vector<std::string>& names) {
  std::vector<TaskIdentity> tasks;
  for (const std::string& name : names) {
    std::optional<TaskIdentity> task = ParseTaskName(name);
    if (!task.has_value()) continue;
    bool seen = false;
    for (const TaskIdentity& t : tasks) seen = seen || t == *task;
    if (!seen) tasks.push_back(*task);
  }
  return tasks;
}

std::vector<TaskIdentity> TasksInCertificate(const std::string& cert_pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())), &BIO_free);
  if (bio == nullptr) return {};
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) return {};
  std::vector<std::string> names;
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans, i);
      if (san->type != GEN_DNS) continue;
      const ASN1_IA5STRING* dns = san->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                         static_cast<size_t>(ASN1_STRING_length(dns)));
    }
    GENERAL_NAMES_free(sans);
  }
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof(cn)) >
      0) {
    names.emplace_back(cn);
  }
  return TasksAmong(names);
}

}  // namespace pst::common
