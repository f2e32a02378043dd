#include "rpc/grpc_caller.h"

#include <grpc/grpc_security_constants.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/transport_security.h"

namespace pst::rpc {
namespace {

absl::Status Denied(const Caller& caller, absl::string_view call, absl::string_view needs) {
  return absl::PermissionDeniedError(absl::StrCat(
      call, " needs ", needs, "; the caller is ",
      caller.tasks.empty() ? absl::StrCat("a certificate that names no pstrain task (", caller.who,
                                          "): give each task a certificate with a SAN such as "
                                          "worker-0.pstrain")
                           : caller.who));
}

}  // namespace

bool Caller::Is(common::TaskType type, int index) const {
  for (const common::TaskIdentity& task : tasks) {
    if (task.type == type && task.index == index) return true;
  }
  return false;
}

bool Caller::IsChief() const { return Is(common::TaskType::kChief, 0); }

std::optional<int> Caller::WorkerIndex() const {
  for (const common::TaskIdentity& task : tasks) {
    if (task.type == common::TaskType::kWorker) return task.index;
  }
  return std::nullopt;
}

Caller CallerFromNames(const std::vector<std::string>& names) {
  Caller caller;
  caller.checked = true;
  caller.tasks = common::TasksAmong(names);
  if (caller.tasks.empty()) {
    caller.who = names.empty() ? "no names" : absl::StrJoin(names, ", ");
  } else {
    std::vector<std::string> task_names;
    for (const common::TaskIdentity& task : caller.tasks) task_names.push_back(common::TaskName(task));
    caller.who = absl::StrJoin(task_names, " and ");
  }
  return caller;
}

Caller CallerOf(const grpc::ServerContextBase& context,
                const common::TransportSecurity& security) {
  if (!security.roles()) return Caller();
  // Under role tokens only the token's tasks count (the processor wrote
  // them); under role certificates, the certificate's names.
  std::vector<const char*> properties = {common::kTokenTaskProperty};
  if (!security.token_roles()) {
    properties = {GRPC_X509_SAN_PROPERTY_NAME, GRPC_X509_CN_PROPERTY_NAME};
  }
  std::vector<std::string> names;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr) {
    for (const char* property : properties) {
      for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
        names.emplace_back(value.data(), value.size());
      }
    }
  }
  return CallerFromNames(names);
}

absl::Status RequireChief(const Caller& caller, absl::string_view call) {
  if (!caller.checked || caller.IsChief()) return absl::OkStatus();
  return Denied(caller, call, "the chief's role (chief-0.pstrain)");
}

absl::Status RequireWorker(const Caller& caller, int worker_index, absl::string_view call) {
  if (!caller.checked || (worker_index >= 0 && caller.Is(common::TaskType::kWorker, worker_index))) {
    return absl::OkStatus();
  }
  return Denied(caller, absl::StrCat(call, " for worker ", worker_index),
                absl::StrCat("that worker's role (worker-", worker_index, ".pstrain)"));
}

absl::Status RequireChiefOrWorker(const Caller& caller, int worker_index, absl::string_view call) {
  if (!caller.checked || caller.IsChief()) return absl::OkStatus();
  if (worker_index < 0 ? caller.WorkerIndex().has_value()
                       : caller.Is(common::TaskType::kWorker, worker_index)) {
    return absl::OkStatus();
  }
  if (worker_index < 0) return Denied(caller, call, "the chief's or a worker's role");
  return Denied(
      caller, absl::StrCat(call, " for worker ", worker_index),
      absl::StrCat("the chief's or that worker's role (worker-", worker_index, ".pstrain)"));
}

absl::Status RequireEvaluator(const Caller& caller, int evaluator_index, absl::string_view call) {
  if (!caller.checked ||
      (evaluator_index >= 0 && caller.Is(common::TaskType::kEvaluator, evaluator_index))) {
    return absl::OkStatus();
  }
  return Denied(caller, absl::StrCat(call, " for evaluator ", evaluator_index),
                absl::StrCat("that evaluator's role (evaluator-", evaluator_index, ".pstrain)"));
}

absl::Status RequireAnyTask(const Caller& caller, absl::string_view call) {
  if (!caller.checked || caller.IsChief() || caller.WorkerIndex().has_value()) {
    return absl::OkStatus();
  }
  for (const common::TaskIdentity& task : caller.tasks) {
    if (task.type == common::TaskType::kEvaluator) return absl::OkStatus();
  }
  return Denied(caller, call, "the chief's, a worker's or an evaluator's role");
}

absl::Status RequirePs(const Caller& caller, absl::string_view call) {
  if (!caller.checked) return absl::OkStatus();
  for (const common::TaskIdentity& task : caller.tasks) {
    if (task.type == common::TaskType::kPs) return absl::OkStatus();
  }
  return Denied(caller, call, "a ps's role");
}

}  // namespace pst::rpc
