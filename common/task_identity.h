// Which task of the cluster a certificate speaks for: the naming convention
// of per-role certificates, free of gRPC.
//
// A certificate names a task with a DNS subject alternative name (or its
// common name) of the form
//
//   <type>-<index>.pstrain      chief-0.pstrain, ps-1.pstrain, worker-3.pstrain
//
// where <type> is chief, ps, worker or evaluator and <index> a decimal task
// index without sign or leading zeros. A certificate may name several tasks
// (worker 0 of a chief-less cluster is also chief 0); other names on it (the
// host's DNS name or IP address, which clients verify) are ignored. A
// certificate with no such name speaks for no task.
#ifndef PST_COMMON_TASK_IDENTITY_H_
#define PST_COMMON_TASK_IDENTITY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tf_config.h"

namespace pst::common {

struct TaskIdentity {
  TaskType type = TaskType::kWorker;
  int index = 0;
  bool operator==(const TaskIdentity& other) const {
    return type == other.type && index == other.index;
  }
};

// The suffix every task name ends with.
inline constexpr char kTaskNameSuffix[] = ".pstrain";

// "worker-3.pstrain" for {kWorker, 3}.
std::string TaskName(const TaskIdentity& task);

// The task `name` names, or nullopt when it does not follow the convention
// (case matters; a DNS name is compared as written in the certificate).
std::optional<TaskIdentity> ParseTaskName(absl::string_view name);

// The tasks among `names` (SANs, then the CN), without repeats, in order.
std::vector<TaskIdentity> TasksAmong(const std::vector<std::string>& names);

// The tasks the first certificate of `cert_pem` names (DNS SANs and CN);
// none when it cannot be parsed (gRPC then refuses it when it serves).
std::vector<TaskIdentity> TasksInCertificate(const std::string& cert_pem);

}  // namespace pst::common

#endif  // PST_COMMON_TASK_IDENTITY_H_
