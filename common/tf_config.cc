#include "common/tf_config.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/edit_distance.h"
#include "common/status_macros.h"

namespace pst::common {
namespace {

using Json = nlohmann::json;

constexpr std::array<TaskType, 4> kAllTaskTypes = {TaskType::kChief, TaskType::kWorker,
                                                   TaskType::kPs, TaskType::kEvaluator};

// Longest value quoted back in an error message; longer ones are cut with "...".
constexpr size_t kMaxQuotedChars = 64;

// A TF_CONFIG file is a few hundred bytes; anything this big is the wrong file.
constexpr size_t kMaxFileBytes = 1 << 20;

// Debian's Abseil has its own absl::string_view, which absl::StrCat and
// friends do not accept from std::string_view, so this file uses these.
template <typename T>
void AppendPiece(std::string& out, const T& piece) {
  if constexpr (std::is_integral_v<T>) {
    out.append(std::to_string(piece));
  } else if constexpr (std::is_same_v<T, absl::string_view>) {
    out.append(piece.data(), piece.size());
  } else {
    out.append(std::string_view(piece));
  }
}

template <typename... Pieces>
std::string Cat(const Pieces&... pieces) {
  std::string out;
  (AppendPiece(out, pieces), ...);
  return out;
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(parts[i]);
  }
  return out;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view StripWhitespace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// Dumps never throw: invalid UTF-8 is replaced rather than reported.
std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// `s` as a JSON string literal (escaped, one line), truncated if long.
std::string Quote(std::string_view s) {
  const bool truncated = s.size() > kMaxQuotedChars;
  std::string quoted = Dump(Json(std::string(s.substr(0, kMaxQuotedChars))));
  if (truncated) quoted.insert(quoted.size() - 1, "...");
  return quoted;
}

// A JSON value as the user wrote it, e.g. `a number: 5` or `a string: "h1"`.
std::string Describe(const Json& value) {
  std::string text = value.is_string() ? Quote(value.get_ref<const std::string&>()) : Dump(value);
  if (text.size() > kMaxQuotedChars + 2) text = Cat(text.substr(0, kMaxQuotedChars), "...");
  const std::string_view type = value.type_name();
  const std::string_view article = type == "array" || type == "object" ? "an" : "a";
  return Cat(article, " ", type, ": ", text);
}

absl::Status Invalid(std::string_view message) {
  return absl::InvalidArgumentError(Cat("TF_CONFIG: ", message));
}

std::string ValidTaskTypesList() {
  std::vector<std::string> names;
  for (TaskType type : kAllTaskTypes) names.push_back(Quote(TaskTypeName(type)));
  return Join(names, ", ");
}

std::vector<std::string>& MutableTasks(ClusterSpec& cluster, TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return cluster.chief;
    case TaskType::kPs:
      return cluster.ps;
    case TaskType::kEvaluator:
      return cluster.evaluator;
    case TaskType::kWorker:
      break;
  }
  return cluster.worker;
}

// Extracts the message of the first syntax error in `text`, e.g. "parse error
// at line 1, column 2: syntax error while parsing object key - ...".
class SyntaxErrorFinder {
 public:
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t, const std::string&, const Json::exception& error) {
    std::string_view what = error.what();
    // Drop the "[json.exception.parse_error.101] " tag.
    if (!what.empty() && what.front() == '[') {
      const size_t end = what.find("] ");
      if (end != std::string_view::npos) what.remove_prefix(end + 2);
    }
    message_.assign(what);
    for (char& c : message_) {
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    return false;
  }

  static std::string Find(std::string_view text) {
    SyntaxErrorFinder finder;
    Json::sax_parse(text.begin(), text.end(), &finder);
    return finder.message_.empty() ? "syntax error" : finder.message_;
  }

 private:
  std::string message_;
};

absl::StatusOr<ClusterSpec> ParseCluster(const Json& cluster) {
  ClusterSpec spec;
  for (const auto& [key, value] : cluster.items()) {
    const absl::StatusOr<TaskType> type = ParseTaskType(key);
    if (!type.ok()) return Invalid(Cat("cluster key: ", type.status().message()));
    const std::string& name = key;
    if (!value.is_array()) {
      std::string example = "[\"host:2222\"]";
      if (value.is_string()) example = Cat("[", Quote(value.get_ref<const std::string&>()), "]");
      return Invalid(Cat("cluster ", Quote(name), " must be a list of \"host:port\" strings, got ",
                         Describe(value), "; write e.g. ", Quote(name), ": ", example));
    }
    if (value.empty()) {
      if (*type == TaskType::kPs || *type == TaskType::kWorker) {
        return Invalid(Cat("cluster ", Quote(name), " is an empty list; a parameter-server job ",
                           "needs at least one ", name, " address, e.g. ", Quote(name),
                           ": [\"host:2222\"]"));
      }
      return Invalid(Cat("cluster ", Quote(name), " is an empty list; list at least one ",
                         "\"host:port\" or remove the key"));
    }
    std::vector<std::string>& tasks = MutableTasks(spec, *type);
    for (size_t i = 0; i < value.size(); ++i) {
      const Json& item = value[i];
      if (!item.is_string()) {
        return Invalid(Cat("cluster ", Quote(name), "[", i,
                           "] must be a \"host:port\" string, got ", Describe(item)));
      }
      const std::string& address = item.get_ref<const std::string&>();
      std::string host;
      int port = 0;
      const absl::Status status = ParseHostPort(address, &host, &port);
      if (!status.ok()) {
        return Invalid(Cat("cluster ", Quote(name), "[", i, "]: ", status.message()));
      }
      tasks.push_back(address);
    }
  }

  if (spec.chief.size() > 1) {
    std::vector<std::string> quoted;
    for (const std::string& address : spec.chief) quoted.push_back(Quote(address));
    return Invalid(Cat("cluster lists ", spec.chief.size(), " chief tasks (", Join(quoted, ", "),
                       "); there can be at most one chief: move the others to \"worker\""));
  }
  if (spec.ps.empty()) {
    return Invalid(
        "cluster has no \"ps\" tasks; a parameter-server job needs at least one ps address, "
        "e.g. \"ps\": [\"host:2222\"]");
  }
  if (spec.worker.empty()) {
    return Invalid(
        "cluster has no \"worker\" tasks; a parameter-server job needs at least one worker "
        "address, e.g. \"worker\": [\"host:2222\"]");
  }

  // Hostnames are case-insensitive and ports are compared as numbers, so
  // "H1:02222" and "h1:2222" are the same address.
  std::map<std::pair<std::string, int>, TaskId> seen;
  for (TaskType type : kAllTaskTypes) {
    const std::vector<std::string>& tasks = spec.Tasks(type);
    for (size_t i = 0; i < tasks.size(); ++i) {
      std::string host;
      int port = 0;
      if (!ParseHostPort(tasks[i], &host, &port).ok()) continue;  // Checked above.
      const TaskId task{type, static_cast<int>(i)};
      const auto [it, inserted] = seen.emplace(std::make_pair(ToLower(host), port), task);
      if (!inserted) {
        return Invalid(Cat("address ", Quote(tasks[i]), " is used by both ",
                           TaskIdString(it->second), " and ", TaskIdString(task),
                           "; give every task its own host:port"));
      }
    }
  }
  return spec;
}

absl::StatusOr<TaskId> ParseTask(const Json& task, const ClusterSpec& cluster) {
  const auto type_it = task.find("type");
  if (type_it == task.end()) {
    return Invalid(Cat("task has no \"type\"; set it to one of ", ValidTaskTypesList(),
                       ", e.g. \"task\": {\"type\": \"worker\", \"index\": 0}"));
  }
  if (!type_it->is_string()) {
    return Invalid(Cat("task.type must be a string such as \"worker\", got ", Describe(*type_it)));
  }
  const absl::StatusOr<TaskType> type = ParseTaskType(type_it->get_ref<const std::string&>());
  if (!type.ok()) return Invalid(Cat("task.type: ", type.status().message()));

  // TensorFlow treats a missing index as 0.
  int64_t index = 0;
  bool index_too_big = false;
  const auto index_it = task.find("index");
  if (index_it != task.end()) {
    if (index_it->is_number_unsigned()) {
      const uint64_t value = index_it->get<uint64_t>();
      constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
      index_too_big = value > static_cast<uint64_t>(kMax);
      index = index_too_big ? kMax : static_cast<int64_t>(value);
    } else if (index_it->is_number_integer()) {
      index = index_it->get<int64_t>();
    } else {
      return Invalid(Cat("task.index must be an integer, got ", Describe(*index_it),
                         "; write e.g. \"index\": 0"));
    }
  }

  const std::string_view name = TaskTypeName(*type);
  const size_t count = cluster.Tasks(*type).size();
  if (count == 0) {
    return Invalid(Cat("task is ", name, ":", index, " but cluster has no ", Quote(name),
                       " tasks; add this task's address to cluster ", Quote(name),
                       " or fix task.type"));
  }
  if (index_too_big || index < 0 || static_cast<uint64_t>(index) >= count) {
    const std::string shown = index_too_big ? Dump(*index_it) : Cat(index);
    const std::string valid = count == 1 ? "0" : Cat("0..", count - 1);
    return Invalid(Cat("task index ", shown, " is out of range: cluster has ", count, " ", name,
                       " task(s) (valid: ", valid, "); fix task.index or the ", Quote(name),
                       " list"));
  }
  return TaskId{*type, static_cast<int>(index)};
}

absl::StatusOr<std::string> ReadTfConfigFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    return Invalid(Cat("cannot open --tf_config file ", Quote(path), ": ",
                       std::generic_category().message(error), "; check the path after '@'"));
  }
  std::string contents;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    contents.append(buffer, n);
    if (contents.size() > kMaxFileBytes) {
      std::fclose(file);
      return Invalid(Cat("--tf_config file ", Quote(path), " is larger than ", kMaxFileBytes,
                         " bytes; point --tf_config=@ at the TF_CONFIG JSON file"));
    }
  }
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return Invalid(Cat("cannot read --tf_config file ", Quote(path), ": ",
                       std::generic_category().message(error), "; check the path after '@'"));
  }
  return contents;
}

}  // namespace

std::string_view TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
    case TaskType::kEvaluator:
      return "evaluator";
  }
  return "unknown";
}

absl::StatusOr<TaskType> ParseTaskType(std::string_view name) {
  for (TaskType type : kAllTaskTypes) {
    if (name == TaskTypeName(type)) return type;
  }
  const std::string lower = ToLower(name);
  if (lower == "master") {
    return absl::InvalidArgumentError(
        Cat("task type ", Quote(name), " is TF1's name for the chief; use \"chief\""));
  }
  std::string message =
      Cat("unknown task type ", Quote(name), "; valid types are ", ValidTaskTypesList());
  // Suggest the closest name, unless it would mean replacing the whole word.
  std::vector<std::string_view> names;
  for (TaskType type : kAllTaskTypes) names.push_back(TaskTypeName(type));
  const std::string_view best = ClosestName(lower, names);
  if (!best.empty()) message += Cat("; did you mean '", best, "'?");
  return absl::InvalidArgumentError(message);
}

std::string TaskIdString(const TaskId& task) {
  return Cat(TaskTypeName(task.type), ":", task.index);
}

const std::vector<std::string>& ClusterSpec::Tasks(TaskType type) const {
  switch (type) {
    case TaskType::kChief:
      return chief;
    case TaskType::kPs:
      return ps;
    case TaskType::kEvaluator:
      return evaluator;
    case TaskType::kWorker:
      break;
  }
  return worker;
}

TaskId ClusterSpec::CoordinatorTask() const {
  if (!chief.empty()) return TaskId{TaskType::kChief, 0};
  return TaskId{TaskType::kWorker, 0};
}

std::string ClusterSpec::CoordinatorAddress() const {
  const std::vector<std::string>& tasks = Tasks(CoordinatorTask().type);
  return tasks.empty() ? std::string() : tasks.front();
}

const std::string& TfConfig::SelfAddress() const {
  static const std::string* const kNone = new std::string();
  const std::vector<std::string>& tasks = cluster.Tasks(task.type);
  if (task.index < 0 || static_cast<size_t>(task.index) >= tasks.size()) return *kNone;
  return tasks[static_cast<size_t>(task.index)];
}

bool TfConfig::IsCoordinator() const {
  const TaskId coordinator = cluster.CoordinatorTask();
  return task.type == coordinator.type && task.index == coordinator.index;
}

absl::StatusOr<TfConfig> ParseTfConfig(std::string_view json) {
  if (StripWhitespace(json).empty()) {
    return Invalid(
        "is empty; expected JSON like {\"cluster\": {\"worker\": [\"host:2222\"], "
        "\"ps\": [\"host:2223\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}");
  }
  const Json doc = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    const std::string_view hint =
        json.find('\'') != std::string_view::npos
            ? "; JSON strings and keys need double quotes, not single quotes"
            : "; fix the JSON (check the shell quoting)";
    return Invalid(Cat("not valid JSON: ", SyntaxErrorFinder::Find(json), hint));
  }
  if (!doc.is_object()) {
    return Invalid(Cat("must be a JSON object like {\"cluster\": {...}, \"task\": {...}}, got ",
                       Describe(doc)));
  }

  const auto cluster_it = doc.find("cluster");
  if (cluster_it == doc.end()) {
    return Invalid(
        "has no \"cluster\"; add e.g. \"cluster\": {\"worker\": [\"host:2222\"], "
        "\"ps\": [\"host:2223\"]}");
  }
  if (!cluster_it->is_object()) {
    return Invalid(
        Cat("\"cluster\" must be an object mapping task types to lists of \"host:port\", got ",
            Describe(*cluster_it),
            "; write e.g. \"cluster\": {\"worker\": [\"host:2222\"], "
            "\"ps\": [\"host:2223\"]}"));
  }
  const auto task_it = doc.find("task");
  if (task_it == doc.end()) {
    return Invalid(
        "has no \"task\"; add e.g. \"task\": {\"type\": \"worker\", \"index\": 0} to say which "
        "task this process is");
  }
  if (!task_it->is_object()) {
    return Invalid(Cat("\"task\" must be an object, got ", Describe(*task_it),
                       "; write e.g. \"task\": {\"type\": \"worker\", \"index\": 0}"));
  }

  TfConfig config;
  absl::StatusOr<ClusterSpec> cluster = ParseCluster(*cluster_it);
  if (!cluster.ok()) return cluster.status();
  config.cluster = *std::move(cluster);
  const absl::StatusOr<TaskId> task = ParseTask(*task_it, config.cluster);
  if (!task.ok()) return task.status();
  config.task = *task;
  return config;
}

std::string TfConfigToJson(const TfConfig& config) {
  nlohmann::ordered_json cluster = nlohmann::ordered_json::object();
  for (TaskType type : kAllTaskTypes) {
    const std::vector<std::string>& tasks = config.cluster.Tasks(type);
    if (!tasks.empty()) cluster[std::string(TaskTypeName(type))] = tasks;
  }
  nlohmann::ordered_json task = nlohmann::ordered_json::object();
  task["type"] = std::string(TaskTypeName(config.task.type));
  task["index"] = config.task.index;
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  doc["cluster"] = std::move(cluster);
  doc["task"] = std::move(task);
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::StatusOr<TfConfig> LoadTfConfig(std::string_view flag_value,
                                      std::optional<TaskType> expected) {
  std::string text;
  std::string source;
  const std::string_view flag = StripWhitespace(flag_value);
  if (!flag.empty()) {
    if (flag.front() == '@') {
      const std::string path(flag.substr(1));
      if (path.empty()) {
        return Invalid("--tf_config=@ names no file; write --tf_config=@/path/to/tf_config.json");
      }
      absl::StatusOr<std::string> contents = ReadTfConfigFile(path);
      if (!contents.ok()) return contents.status();
      text = *std::move(contents);
      source = Cat("file ", Quote(path), " named by --tf_config");
    } else {
      text = std::string(flag);
      source = "--tf_config";
    }
  } else {
    const char* env = std::getenv("TF_CONFIG");
    if (env == nullptr || StripWhitespace(env).empty()) {
      return Invalid(
          "no cluster spec: set the TF_CONFIG environment variable or pass "
          "--tf_config=<json or @file>");
    }
    text = env;
    source = "the TF_CONFIG environment variable";
  }

  absl::StatusOr<TfConfig> config = ParseTfConfig(text);
  if (!config.ok()) {
    return absl::InvalidArgumentError(Cat(config.status().message(), " (read from ", source, ")"));
  }
  if (expected.has_value() && config->task.type != *expected) {
    const std::string_view actual = TaskTypeName(config->task.type);
    const std::string_view binary = TaskTypeName(*expected);
    return Invalid(Cat("task type is ", Quote(actual), " but this is the ", binary,
                       " binary; start the ", actual, " binary for ", actual,
                       " tasks, or set task.type to ", Quote(binary), " (read from ", source, ")"));
  }
  return config;
}

absl::Status ParseHostPort(std::string_view address, std::string* host, int* port) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "address is empty; write it as host:port, e.g. \"localhost:2222\"");
  }
  const size_t scheme = address.find("://");
  if (scheme != std::string_view::npos) {
    return absl::InvalidArgumentError(Cat("address ", Quote(address),
                                          " has a scheme; write plain host:port, e.g. ",
                                          Quote(address.substr(scheme + 3))));
  }

  std::string_view host_part;
  std::string_view port_part;
  if (address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(
          Cat("address ", Quote(address), " has no closing ']'; write IPv6 as \"[::1]:2222\""));
    }
    host_part = address.substr(1, close - 1);
    const std::string_view rest = address.substr(close + 1);
    if (rest.empty() || rest.front() != ':') {
      return absl::InvalidArgumentError(Cat("address ", Quote(address),
                                            " has no port after ']'; write it as \"[",
                                            host_part.empty() ? "::1" : host_part, "]:2222\""));
    }
    port_part = rest.substr(1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(Cat("address ", Quote(address),
                                            " has no port; write it as host:port, e.g. ",
                                            Quote(Cat(address, ":2222"))));
    }
    host_part = address.substr(0, colon);
    port_part = address.substr(colon + 1);
    if (host_part.find(':') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          Cat("address ", Quote(address), " has more than one ':'; write an IPv6 host in ",
              "brackets, e.g. ", Quote(Cat("[", host_part, "]:", port_part))));
    }
  }

  if (host_part.empty()) {
    return absl::InvalidArgumentError(Cat("address ", Quote(address),
                                          " has no host; write it as host:port, e.g. ",
                                          Quote(Cat("localhost:", port_part))));
  }
  for (char c : host_part) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '/' || c == '[' || c == ']') {
      return absl::InvalidArgumentError(
          Cat("host ", Quote(host_part), " in address ", Quote(address),
              " contains whitespace or one of '/', '[', ']'; write plain host:port"));
    }
  }

  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (port_part.empty() || !std::all_of(port_part.begin(), port_part.end(), is_digit)) {
    return absl::InvalidArgumentError(Cat("port ", Quote(port_part), " in address ", Quote(address),
                                          " is not a number; use a port in 1..65535"));
  }
  const std::string_view digits =
      port_part.substr(std::min(port_part.find_first_not_of('0'), port_part.size()));
  int value = 0;
  if (digits.size() <= 5) {
    for (char c : digits) value = value * 10 + (c - '0');
  }
  if (digits.size() > 5 || value < 1 || value > 65535) {
    return absl::InvalidArgumentError(Cat("port ", port_part, " in address ", Quote(address),
                                          " is out of range; use a port in 1..65535"));
  }

  if (host != nullptr) host->assign(host_part);
  if (port != nullptr) *port = value;
  return absl::OkStatus();
}

absl::StatusOr<TfConfig> WithWorkerCount(const TfConfig& config, int n) {
  if (n < 1) return Invalid(Cat("the job needs at least one worker, not ", n));
  std::string host;
  int port = 0;
  PST_RETURN_IF_ERROR(ParseHostPort(config.cluster.worker.front(), &host, &port));
  TfConfig scaled = config;
  scaled.cluster.worker.clear();
  for (int i = 0; i < n; ++i) scaled.cluster.worker.push_back(Cat(host, "-", i, ":", port));
  // Parsed again, so every rule of a TF_CONFIG holds for the result.
  return ParseTfConfig(TfConfigToJson(scaled));
}

}  // namespace pst::common
