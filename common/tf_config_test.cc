#include "common/tf_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pst::common {
namespace {

constexpr char kValidConfig[] = R"({
  "cluster": {
    "chief": ["h0:2222"],
    "worker": ["h1:2222", "h2:2222"],
    "ps": ["h3:2222", "h4:2222"],
    "evaluator": ["h5:2222"]
  },
  "task": {"type": "worker", "index": 1}
})";

// Worker 0 is the coordinator: no chief.
constexpr char kNoChiefConfig[] =
    R"({"cluster": {"worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]},
        "task": {"type": "worker", "index": 0}})";

// A one-worker, one-ps cluster with `task` as the task object.
std::string WithTask(std::string_view task) {
  return std::string(R"({"cluster": {"worker": ["h1:2222"], "ps": ["h2:2222"]}, "task": )") +
         std::string(task) + "}";
}

// A cluster object `cluster` with task worker 0.
std::string WithCluster(std::string_view cluster) {
  return std::string(R"({"cluster": )") + std::string(cluster) +
         R"(, "task": {"type": "worker", "index": 0}})";
}

std::string Message(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Expects InvalidArgument whose message starts with "TF_CONFIG: " and contains
// each of `parts`.
template <typename T>
void ExpectInvalid(const absl::StatusOr<T>& result, std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  const std::string message = Message(result.status());
  EXPECT_EQ(message.substr(0, 11), "TF_CONFIG: ") << message;
  EXPECT_FALSE(Contains(message, "\n")) << message;
  for (std::string_view part : parts) {
    EXPECT_TRUE(Contains(message, part)) << "missing \"" << part << "\" in: " << message;
  }
}

// Sets (or, with nullopt, unsets) an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value.has_value()) {
      setenv(name, value->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string WriteTempFile(std::string_view name, std::string_view contents) {
  const std::string path = testing::TempDir() + std::string(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  return path;
}

TEST(TfConfigTest, TaskTypeNames_RoundTrip) {
  for (TaskType type : {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator}) {
    absl::StatusOr<TaskType> parsed = ParseTaskType(TaskTypeName(type));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_EQ(TaskIdString({TaskType::kPs, 3}), "ps:3");
  EXPECT_EQ(TaskIdString({TaskType::kChief, 0}), "chief:0");
}

TEST(TfConfigTest, ParseTaskType_Typo_SuggestsClosest) {
  absl::StatusOr<TaskType> type = ParseTaskType("wroker");
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message = Message(type.status());
  EXPECT_TRUE(Contains(message, "\"wroker\"")) << message;
  EXPECT_TRUE(Contains(message, "\"chief\", \"worker\", \"ps\", \"evaluator\"")) << message;
  EXPECT_TRUE(Contains(message, "did you mean 'worker'?")) << message;

  type = ParseTaskType("Chief");
  ASSERT_FALSE(type.ok());
  EXPECT_TRUE(Contains(Message(type.status()), "did you mean 'chief'?")) << type.status();
}

TEST(TfConfigTest, ParseTaskType_FarFromAnyName_NoSuggestion) {
  absl::StatusOr<TaskType> type = ParseTaskType("scheduler");
  ASSERT_FALSE(type.ok());
  EXPECT_FALSE(Contains(Message(type.status()), "did you mean")) << type.status();
  // Two edits would turn any two-letter word into "ps"; that is no suggestion.
  type = ParseTaskType("xy");
  ASSERT_FALSE(type.ok());
  EXPECT_FALSE(Contains(Message(type.status()), "did you mean")) << type.status();
}

TEST(TfConfigTest, Parse_Valid_AllTaskTypes) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(kValidConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.chief, std::vector<std::string>({"h0:2222"}));
  EXPECT_EQ(config->cluster.worker, std::vector<std::string>({"h1:2222", "h2:2222"}));
  EXPECT_EQ(config->cluster.ps, std::vector<std::string>({"h3:2222", "h4:2222"}));
  EXPECT_EQ(config->cluster.evaluator, std::vector<std::string>({"h5:2222"}));
  EXPECT_EQ(config->task.type, TaskType::kWorker);
  EXPECT_EQ(config->task.index, 1);
  EXPECT_EQ(config->SelfAddress(), "h2:2222");
  EXPECT_EQ(config->cluster.Tasks(TaskType::kPs).size(), 2u);
}

TEST(TfConfigTest, Parse_EvaluatorTask) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(
      R"({"cluster": {"worker": ["h1:1"], "ps": ["h2:1"], "evaluator": ["h3:1"]},
          "task": {"type": "evaluator", "index": 0}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task.type, TaskType::kEvaluator);
  EXPECT_EQ(config->SelfAddress(), "h3:1");
  EXPECT_FALSE(config->IsCoordinator());
}

TEST(TfConfigTest, Parse_NoChief_Worker0IsCoordinator) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(kNoChiefConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  const TaskId coordinator = config->cluster.CoordinatorTask();
  EXPECT_EQ(coordinator.type, TaskType::kWorker);
  EXPECT_EQ(coordinator.index, 0);
  EXPECT_EQ(config->cluster.CoordinatorAddress(), "h1:2222");
  EXPECT_TRUE(config->IsCoordinator());

  config->task.index = 1;
  EXPECT_FALSE(config->IsCoordinator());
  config->task = {TaskType::kPs, 0};
  EXPECT_FALSE(config->IsCoordinator());
}

TEST(TfConfigTest, Parse_WithChief_ChiefIsCoordinator) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(kValidConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  const TaskId coordinator = config->cluster.CoordinatorTask();
  EXPECT_EQ(coordinator.type, TaskType::kChief);
  EXPECT_EQ(coordinator.index, 0);
  EXPECT_EQ(config->cluster.CoordinatorAddress(), "h0:2222");

  config->task = {TaskType::kWorker, 0};
  EXPECT_FALSE(config->IsCoordinator());
  config->task = {TaskType::kChief, 0};
  EXPECT_TRUE(config->IsCoordinator());
}

TEST(TfConfigTest, Parse_MissingIndex_DefaultsToZero) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(WithTask(R"({"type": "ps"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task.type, TaskType::kPs);
  EXPECT_EQ(config->task.index, 0);
}

TEST(TfConfigTest, Parse_UnknownTopLevelKeys_Ignored) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(
      R"({"cluster": {"worker": ["h1:1"], "ps": ["h2:1"]}, "task": {"type": "worker"},
          "environment": "cloud", "rpc_layer": "grpc"})");
  ASSERT_TRUE(config.ok()) << config.status();
}

TEST(TfConfigTest, Parse_IPv6Addresses) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(
      WithCluster(R"({"worker": ["[::1]:2222"], "ps": ["[::1]:2223", "[fe80::1]:2222"]})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->SelfAddress(), "[::1]:2222");
}

TEST(TfConfigTest, Parse_MalformedJson) {
  ExpectInvalid(ParseTfConfig(R"({"cluster": {"worker": ["h1:1"],)"), {"not valid JSON", "line 1"});
  ExpectInvalid(ParseTfConfig("{cluster: 1}"), {"not valid JSON"});
}

TEST(TfConfigTest, Parse_SingleQuotes_SaysUseDoubleQuotes) {
  ExpectInvalid(ParseTfConfig("{'cluster': {'worker': ['h1:1']}}"),
                {"not valid JSON", "double quotes"});
}

TEST(TfConfigTest, Parse_Empty) {
  ExpectInvalid(ParseTfConfig(""), {"is empty"});
  ExpectInvalid(ParseTfConfig("  \n"), {"is empty"});
}

TEST(TfConfigTest, Parse_NotAnObject) {
  ExpectInvalid(ParseTfConfig("[1, 2]"), {"must be a JSON object", "got an array: [1,2]"});
  ExpectInvalid(ParseTfConfig(R"("worker")"), {"must be a JSON object", "got a string"});
  ExpectInvalid(ParseTfConfig("42"), {"must be a JSON object", "42"});
}

TEST(TfConfigTest, Parse_MissingCluster) {
  ExpectInvalid(ParseTfConfig(R"({"task": {"type": "worker", "index": 0}})"),
                {"no \"cluster\"", "\"ps\""});
}

TEST(TfConfigTest, Parse_ClusterNotAnObject) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"(["h1:1"])")),
                {"\"cluster\" must be an object", "[\"h1:1\"]"});
}

TEST(TfConfigTest, Parse_MissingTask) {
  ExpectInvalid(ParseTfConfig(R"({"cluster": {"worker": ["h1:1"], "ps": ["h2:1"]}})"),
                {"no \"task\"", "\"type\": \"worker\""});
}

TEST(TfConfigTest, Parse_TaskNotAnObject) {
  ExpectInvalid(ParseTfConfig(WithTask(R"("worker:0")")),
                {"\"task\" must be an object", "\"worker:0\""});
}

TEST(TfConfigTest, Parse_TypoInClusterKey_SuggestsClosest) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"wroker": ["h1:1"], "ps": ["h2:1"]})")),
                {"cluster key", "\"wroker\"", "\"evaluator\"", "did you mean 'worker'?"});
}

TEST(TfConfigTest, Parse_TypoInTaskType_SuggestsClosest) {
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "wroker", "index": 0})")),
                {"task.type", "\"wroker\"", "\"chief\", \"worker\", \"ps\", \"evaluator\"",
                 "did you mean 'worker'?"});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "pss", "index": 0})")), {"did you mean 'ps'?"});
}

TEST(TfConfigTest, Parse_TaskTypeMissingOrNotAString) {
  ExpectInvalid(ParseTfConfig(WithTask(R"({"index": 0})")), {"task has no \"type\""});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": 1, "index": 0})")),
                {"task.type must be a string", "got a number: 1"});
}

TEST(TfConfigTest, Parse_Master_SaysUseChief) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"master": ["h0:1"], "worker": ["h1:1"],
                                              "ps": ["h2:1"]})")),
                {"\"master\"", "TF1", "use \"chief\""});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "master", "index": 0})")),
                {"task.type", "\"master\"", "TF1", "use \"chief\""});
}

TEST(TfConfigTest, Parse_IndexTooBig) {
  ExpectInvalid(ParseTfConfig(R"({"cluster": {"worker": ["h1:1", "h2:1"], "ps": ["h3:1"]},
                                  "task": {"type": "worker", "index": 3}})"),
                {"task index 3 is out of range: cluster has 2 worker task(s) (valid: 0..1)"});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "ps", "index": 1})")),
                {"task index 1 is out of range: cluster has 1 ps task(s) (valid: 0)"});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "ps", "index": 18446744073709551615})")),
                {"task index 18446744073709551615 is out of range"});
}

TEST(TfConfigTest, Parse_NegativeIndex) {
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "worker", "index": -1})")),
                {"task index -1 is out of range", "(valid: 0)"});
}

TEST(TfConfigTest, Parse_NonIntegerIndex) {
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "worker", "index": "0"})")),
                {"task.index must be an integer", "got a string: \"0\""});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "worker", "index": 0.5})")),
                {"task.index must be an integer", "0.5"});
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "worker", "index": null})")),
                {"task.index must be an integer", "null"});
}

TEST(TfConfigTest, Parse_TaskTypeNotInCluster) {
  ExpectInvalid(ParseTfConfig(WithTask(R"({"type": "chief", "index": 0})")),
                {"task is chief:0", "no \"chief\" tasks"});
}

TEST(TfConfigTest, Parse_DuplicateAddressWithinType) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1:1", "h1:1"], "ps": ["h2:1"]})")),
                {"\"h1:1\"", "worker:0", "worker:1"});
}

TEST(TfConfigTest, Parse_DuplicateAddressAcrossTypes) {
  ExpectInvalid(
      ParseTfConfig(WithCluster(R"({"worker": ["h1:1", "h2:1"], "ps": ["h3:1", "h2:1"]})")),
      {"\"h2:1\"", "worker:1", "ps:1", "own host:port"});
  // Hostnames are case-insensitive and "01" is port 1.
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["H1:01"], "ps": ["h1:1"]})")),
                {"worker:0", "ps:0"});
}

TEST(TfConfigTest, Parse_NoPs) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1:1"]})")),
                {"cluster has no \"ps\" tasks; a parameter-server job needs at least one ps "
                 "address, e.g. \"ps\": [\"host:2222\"]"});
}

TEST(TfConfigTest, Parse_EmptyPsList) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1:1"], "ps": []})")),
                {"\"ps\" is an empty list", "at least one ps address"});
}

TEST(TfConfigTest, Parse_EmptyOptionalList) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"chief": [], "worker": ["h1:1"], "ps": ["h2:1"]})")),
                {"\"chief\" is an empty list", "remove the key"});
}

TEST(TfConfigTest, Parse_NoWorker) {
  ExpectInvalid(ParseTfConfig(R"({"cluster": {"chief": ["h0:1"], "ps": ["h2:1"]},
                                  "task": {"type": "chief"}})"),
                {"no \"worker\" tasks", "\"worker\": [\"host:2222\"]"});
}

TEST(TfConfigTest, Parse_TwoChiefs) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"chief": ["h0:1", "h9:1"], "worker": ["h1:1"],
                                    "ps": ["h2:1"]})")),
                {"2 chief tasks", "\"h0:1\"", "\"h9:1\"", "at most one chief"});
}

TEST(TfConfigTest, Parse_ClusterListNotAList) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": "h1:1", "ps": ["h2:1"]})")),
                {"\"worker\" must be a list", "\"worker\": [\"h1:1\"]"});
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": [2222], "ps": ["h2:1"]})")),
                {"\"worker\"[0] must be a \"host:port\" string", "got a number: 2222"});
}

TEST(TfConfigTest, Parse_BadPort) {
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1:1"], "ps": ["h2:http"]})")),
                {"\"ps\"[0]", "port \"http\"", "not a number", "1..65535"});
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1:1"], "ps": ["h2:65536"]})")),
                {"port 65536", "out of range", "1..65535"});
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1:0"], "ps": ["h2:1"]})")),
                {"\"worker\"[0]", "port 0", "out of range"});
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": ["h1"], "ps": ["h2:1"]})")),
                {"\"h1\" has no port", "\"h1:2222\""});
  ExpectInvalid(ParseTfConfig(WithCluster(R"({"worker": [""], "ps": ["h2:1"]})")),
                {"address is empty"});
}

TEST(TfConfigTest, ParseHostPort_Valid) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("localhost:2222", &host, &port).ok());
  EXPECT_EQ(host, "localhost");
  EXPECT_EQ(port, 2222);
  ASSERT_TRUE(ParseHostPort("[::1]:65535", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
  ASSERT_TRUE(ParseHostPort("10.0.0.1:1", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 1);
}

TEST(TfConfigTest, ParseHostPort_Invalid) {
  std::string host = "unchanged";
  int port = -1;
  for (const char* bad :
       {"", ":2222", "h1", "h1:", "h1:-1", "h1:+80", "h1:99999999999", "::1:2222", "[::1]",
        "[::1]2222", "[::1:2222", "[]:2222", "grpc://h1:2222", "h 1:2222", "h1:2222 "}) {
    const absl::Status status = ParseHostPort(bad, &host, &port);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
    EXPECT_FALSE(Contains(Message(status), "\n")) << status;
  }
  EXPECT_EQ(host, "unchanged");
  EXPECT_EQ(port, -1);
  EXPECT_TRUE(Contains(Message(ParseHostPort("::1:2222", &host, &port)), "\"[::1]:2222\""));
  EXPECT_TRUE(Contains(Message(ParseHostPort("grpc://h1:2222", &host, &port)), "\"h1:2222\""));
}

TEST(TfConfigTest, ToJson_RoundTrip) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(kValidConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string json = TfConfigToJson(*config);
  EXPECT_FALSE(Contains(json, "\n")) << json;
  absl::StatusOr<TfConfig> again = ParseTfConfig(json);
  ASSERT_TRUE(again.ok()) << again.status() << " for " << json;
  EXPECT_EQ(again->cluster.chief, config->cluster.chief);
  EXPECT_EQ(again->cluster.worker, config->cluster.worker);
  EXPECT_EQ(again->cluster.ps, config->cluster.ps);
  EXPECT_EQ(again->cluster.evaluator, config->cluster.evaluator);
  EXPECT_EQ(again->task.type, config->task.type);
  EXPECT_EQ(again->task.index, config->task.index);
  EXPECT_EQ(TfConfigToJson(*again), json);
}

TEST(TfConfigTest, ToJson_OmitsEmptyLists) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(kNoChiefConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TfConfigToJson(*config),
            R"({"cluster":{"worker":["h1:2222","h2:2222"],"ps":["h3:2222"]},)"
            R"("task":{"type":"worker","index":0}})");
}

TEST(TfConfigTest, Load_FromFlagJson) {
  absl::StatusOr<TfConfig> config = LoadTfConfig(kNoChiefConfig, TaskType::kWorker);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->SelfAddress(), "h1:2222");
}

TEST(TfConfigTest, Load_FlagWinsOverEnv) {
  ScopedEnv env("TF_CONFIG", WithTask(R"({"type": "ps"})"));
  absl::StatusOr<TfConfig> config = LoadTfConfig(kNoChiefConfig, TaskType::kWorker);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task.type, TaskType::kWorker);
}

TEST(TfConfigTest, Load_FromFile) {
  const std::string path = WriteTempFile("tf_config_test_ps.json", WithTask(R"({"type": "ps"})"));
  absl::StatusOr<TfConfig> config = LoadTfConfig("@" + path, TaskType::kPs);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task.type, TaskType::kPs);
  EXPECT_EQ(config->SelfAddress(), "h2:2222");
  std::remove(path.c_str());
}

TEST(TfConfigTest, Load_FromFile_BadJsonNamesFile) {
  const std::string path = WriteTempFile("tf_config_test_bad.json", "{not json");
  ExpectInvalid(LoadTfConfig("@" + path, TaskType::kPs), {"not valid JSON", path});
  std::remove(path.c_str());
}

TEST(TfConfigTest, Load_MissingFile) {
  const std::string path = testing::TempDir() + "tf_config_test_does_not_exist.json";
  ExpectInvalid(LoadTfConfig("@" + path, TaskType::kWorker), {path, "No such file or directory"});
  ExpectInvalid(LoadTfConfig("@", TaskType::kWorker), {"names no file"});
}

TEST(TfConfigTest, Load_FileIsDirectory) {
  ExpectInvalid(LoadTfConfig("@" + testing::TempDir(), TaskType::kWorker), {"--tf_config file"});
}

TEST(TfConfigTest, Load_FromEnv) {
  ScopedEnv env("TF_CONFIG", kNoChiefConfig);
  absl::StatusOr<TfConfig> config = LoadTfConfig("", TaskType::kWorker);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->SelfAddress(), "h1:2222");
  EXPECT_TRUE(config->IsCoordinator());
}

TEST(TfConfigTest, Load_FromEnv_ErrorNamesSource) {
  ScopedEnv env("TF_CONFIG", WithCluster(R"({"worker": ["h1:1"]})"));
  ExpectInvalid(LoadTfConfig("", TaskType::kWorker),
                {"no \"ps\" tasks", "TF_CONFIG environment variable"});
}

TEST(TfConfigTest, Load_NothingSet) {
  {
    ScopedEnv env("TF_CONFIG", std::nullopt);
    ExpectInvalid(LoadTfConfig("", TaskType::kWorker),
                  {"TF_CONFIG: no cluster spec: set the TF_CONFIG environment variable or pass "
                   "--tf_config=<json or @file>"});
  }
  {
    ScopedEnv env("TF_CONFIG", "");
    ExpectInvalid(LoadTfConfig("", TaskType::kWorker), {"no cluster spec"});
  }
}

TEST(TfConfigTest, Load_TypeMismatchWithBinary) {
  ExpectInvalid(LoadTfConfig(kNoChiefConfig, TaskType::kPs),
                {"TF_CONFIG: task type is \"worker\" but this is the ps binary; start the worker "
                 "binary for worker tasks, or set task.type to \"ps\""});
  ExpectInvalid(LoadTfConfig(WithTask(R"({"type": "ps"})"), TaskType::kChief),
                {"task type is \"ps\" but this is the chief binary"});
}

TEST(TfConfigTest, WithWorkerCount_NamesTheWorkersAfterTheFirst) {
  absl::StatusOr<TfConfig> tf = ParseTfConfig(
      R"({"cluster": {"chief": ["c:2222"], "ps": ["p:2222"], "worker": ["worker:2222"]},
          "task": {"type": "worker", "index": 0}})");
  ASSERT_TRUE(tf.ok()) << tf.status();
  absl::StatusOr<TfConfig> three = WithWorkerCount(*tf, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->cluster.worker,
            (std::vector<std::string>{"worker-0:2222", "worker-1:2222", "worker-2:2222"}));
  EXPECT_EQ(three->cluster.ps, tf->cluster.ps);
  EXPECT_EQ(WithWorkerCount(*tf, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // A generated name may not take another task's address.
  absl::StatusOr<TfConfig> clash = ParseTfConfig(
      R"({"cluster": {"ps": ["w-1:2222"], "worker": ["w:2222"]},
          "task": {"type": "ps", "index": 0}})");
  ASSERT_TRUE(clash.ok()) << clash.status();
  const absl::Status status = WithWorkerCount(*clash, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("w-1:2222"), std::string::npos) << status;
  // A worker task past the new count.
  absl::StatusOr<TfConfig> last = ParseTfConfig(
      R"({"cluster": {"ps": ["p:2222"], "worker": ["a:1", "b:1", "c:1"]},
          "task": {"type": "worker", "index": 2}})");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(WithWorkerCount(*last, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::common
