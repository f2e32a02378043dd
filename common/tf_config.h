// TF_CONFIG: the cluster spec and task identity, in the same JSON that
// TensorFlow and Kubeflow's TFJob use:
//
//   {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"],
//                "ps": ["h3:2222"]},
//    "task": {"type": "worker", "index": 0}}
//
// Task types: chief, worker, ps, evaluator. "master" is not accepted (it is
// TF1's name for chief; the error says so). When no chief is listed, worker 0
// acts as chief, as in TensorFlow and TFJob.
//
// Everything here is a pure function of its input; safe to call from any
// thread.
#ifndef PST_COMMON_TF_CONFIG_H_
#define PST_COMMON_TF_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pst::common {

enum class TaskType { kChief, kWorker, kPs, kEvaluator };

// "chief", "worker", "ps", "evaluator".
std::string_view TaskTypeName(TaskType type);

// Parses a task type name. InvalidArgument names the bad value, lists the
// valid ones and suggests the closest ("did you mean 'worker'?").
absl::StatusOr<TaskType> ParseTaskType(std::string_view name);

struct TaskId {
  TaskType type = TaskType::kWorker;
  int index = 0;
};

// "worker:0".
std::string TaskIdString(const TaskId& task);

struct ClusterSpec {
  std::vector<std::string> chief;
  std::vector<std::string> worker;
  std::vector<std::string> ps;
  std::vector<std::string> evaluator;

  const std::vector<std::string>& Tasks(TaskType type) const;
  // The task that runs the coordinator: chief 0, or worker 0 if no chief.
  TaskId CoordinatorTask() const;
  std::string CoordinatorAddress() const;
};

struct TfConfig {
  ClusterSpec cluster;
  TaskId task;

  // This task's host:port.
  const std::string& SelfAddress() const;
  // True for chief 0, and for worker 0 when the cluster has no chief.
  bool IsCoordinator() const;
};

// Parses and validates a TF_CONFIG JSON document. Returns InvalidArgument,
// with a one-line message that says what to fix, when:
//   - the text is not JSON, or not an object, or lacks "cluster" / "task";
//   - a cluster key is not a known task type, or its value is not a list of
//     non-empty "host:port" strings with a port in 1..65535;
//   - the cluster has no "ps" tasks or no "worker" tasks;
//   - more than one chief is listed;
//   - the same host:port appears twice anywhere in the cluster;
//   - task.type is unknown, or task.index is not an integer, or it is out of
//     range for its type.
// The message starts with "TF_CONFIG: ".
absl::StatusOr<TfConfig> ParseTfConfig(std::string_view json);

// Serializes back to TF_CONFIG JSON (round-trips through ParseTfConfig).
std::string TfConfigToJson(const TfConfig& config);

// `config` with its worker list replaced by `n` workers named after its
// first one: "h:p" becomes "h-0:p", ..., "h-<n-1>:p" (--num_workers: the
// replicas of a scaled service, which claim their indices, have no names
// of their own). Errors: InvalidArgument, as ParseTfConfig's, for n < 1, a
// name that collides with another task's, or a worker task whose index is
// not below n.
absl::StatusOr<TfConfig> WithWorkerCount(const TfConfig& config, int n);

// Loads the TF_CONFIG a daemon runs with: `flag_value` if non-empty (either
// the JSON itself or "@path" to read it from a file), else the TF_CONFIG
// environment variable. Then checks that the task type is `expected`: a ps
// binary started with task type "worker" gets InvalidArgument naming both.
// With `expected` empty, any task type is accepted (tools that only need
// the cluster).
// NotFound-style problems (no flag, no env var, unreadable file) come back
// as InvalidArgument too, naming what is missing.
absl::StatusOr<TfConfig> LoadTfConfig(std::string_view flag_value,
                                      std::optional<TaskType> expected);

// Splits "host:port" (IPv6 as "[::1]:port"). InvalidArgument if malformed.
absl::Status ParseHostPort(std::string_view address, std::string* host, int* port);

}  // namespace pst::common

#endif  // PST_COMMON_TF_CONFIG_H_
