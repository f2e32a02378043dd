#include "tools/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/progress.h"
#include "common/tf_config.h"
#include "tools/shaped_link.h"
#include "tools/subprocess.h"

namespace pst::tools {
namespace {

struct Child {
  std::string task;    // "ps:0"
  std::string binary;  // "worker"; empty for a shell command
  SpawnOptions spawn;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  int restarts = 0;
  bool coordinator = false;  // its progress lines may become the live line
  std::thread reader;
  // Of this run's output (guarded by the launcher's lines mutex): its first
  // error line and its last line, as ErrorOf reads them.
  std::string first_error;
  std::string last_line;
};

// A daemon's log line "12:34:56.789 E worker:0] message" (common/logging.cc's
// pattern; E and C are error and critical): its level letter and message.
// nullopt for a line that is not a log line (a main's own message on
// stderr, a Python traceback).
std::optional<std::pair<char, std::string>> ParseLogLine(const std::string& line) {
  // "HH:MM:SS.mmm L task] message"
  auto digits = [&](size_t at) {
    return at + 1 < line.size() && absl::ascii_isdigit(line[at]) &&
           absl::ascii_isdigit(line[at + 1]);
  };
  if (!digits(0) || line[2] != ':' || !digits(3) || line[5] != ':' || !digits(6) ||
      line[8] != '.') {
    return std::nullopt;
  }
  const size_t space = line.find(' ', 9);
  if (space == std::string::npos || space + 3 > line.size() || line[space + 2] != ' ' ||
      std::strchr("TDIWEC", line[space + 1]) == nullptr) {
    return std::nullopt;
  }
  const size_t end_of_task = line.find("] ", space + 3);
  if (end_of_task == std::string::npos) return std::nullopt;
  return std::make_pair(line[space + 1], line.substr(end_of_task + 2));
}

// Notes `line` of `child`'s output for ErrorOf. REQUIRES: the lines mutex.
void NoteLine(Child* child, std::string line) {
  // Colors, should a daemon's logger add them: ESC [ ... m.
  for (size_t esc = line.find('\x1b'); esc != std::string::npos; esc = line.find('\x1b', esc)) {
    const size_t m = line.find('m', esc);
    line.erase(esc, m == std::string::npos ? std::string::npos : m - esc + 1);
  }
  if (line.empty()) return;
  std::optional<std::pair<char, std::string>> log = ParseLogLine(line);
  if (log.has_value() && (log->first == 'E' || log->first == 'C') && child->first_error.empty()) {
    child->first_error = log->second;
  }
  child->last_line = log.has_value() ? log->second : line;
}

// What made `child` fail, for the launcher's last line: its first error
// line, else its last line (a main's fatal message, which names the binary:
// "worker: --device=gpu, ..." loses its "worker: "), else how it ended.
std::string ErrorOf(const Child& child) {
  std::string error = !child.first_error.empty() ? child.first_error : child.last_line;
  const std::string own = child.binary + ": ";
  if (!child.binary.empty() && error.rfind(own, 0) == 0) error = error.substr(own.size());
  return error.empty() ? DescribeWaitStatus(child.wait_status) : error;
}

// The launcher's stdout: every line goes out whole, and on a terminal
// (ProgressMode::kTty) the coordinator's progress lines become one live line
// kept below the other lines. Thread-safe.
class Console {
 public:
  explicit Console(bool live)
      : live_(live ? common::ProgressLine::ForFd(STDOUT_FILENO, /*terminal=*/true,
                                                 absl::ZeroDuration())
                   : nullptr) {}

  void Print(const std::string& line) {
    if (live_ != nullptr) {
      // Written with write(2) like the live line, so the two stay in order.
      live_->Print(line);
      return;
    }
    absl::MutexLock lock(&mu_);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

  // A line of the coordinator task's output; `prefix` names the task.
  void PrintFromCoordinator(const std::string& prefix, const std::string& line) {
    if (live_ != nullptr) {
      // Reformatted from what was parsed, without the log's time and task.
      std::optional<common::Progress> progress = common::ParseProgress(line);
      if (progress.has_value()) {
        live_->Update(common::FormatProgress(*progress));
        return;
      }
    }
    Print(prefix + line);
  }

  // Ends the live line, leaving the last progress on screen.
  void Finish() {
    if (live_ != nullptr) live_->Finish();
  }

 private:
  absl::Mutex mu_;  // plain output: lines go out whole
  const std::unique_ptr<common::ProgressLine> live_;
};

// What a command task (--worker_command, --evaluator_command) gets from the
// daemon flags, as environment variables: the connection's security for
// every one, the directories and the metric for an evaluator.
struct CommandEnv {
  const char* env;
  const char* flag;
  bool evaluator_only;
};
constexpr CommandEnv kCommandEnv[] = {
    {"PSTRAIN_TLS_CERT", "tls_cert", false},
    {"PSTRAIN_TLS_KEY", "tls_key", false},
    {"PSTRAIN_TLS_CA", "tls_ca", false},
    {"PSTRAIN_AUTH_TOKEN_FILE", "auth_token_file", false},
    {"PSTRAIN_TLS_SERVER_NAME", "tls_server_name", false},
    {"PSTRAIN_CHECKPOINT_DIR", "checkpoint_dir", true},
    {"PSTRAIN_SUMMARY_DIR", "summary_dir", true},
    {"PSTRAIN_DATA_DIR", "data_dir", true},
    {"PSTRAIN_BEST_METRIC", "best_metric", true},
    {"PSTRAIN_BEST_MODE", "best_mode", true},
};

// The value of --`name`=VALUE among `flags` ("" when absent).
std::string FlagValue(const std::vector<std::string>& flags, const std::string& name) {
  const std::string prefix = absl::StrCat("--", name, "=");
  std::string value;
  for (const std::string& flag : flags) {
    if (flag.rfind(prefix, 0) == 0) value = flag.substr(prefix.size());
  }
  return value;
}

}  // namespace

absl::Status CheckLocalClusterOptions(const LocalClusterOptions& options) {
  if (options.num_ps < 1 || options.num_workers < 1) {
    return absl::InvalidArgumentError("--ps and --workers must be at least 1");
  }
  if (!options.worker_command.empty() && !options.with_chief) {
    return absl::InvalidArgumentError(
        "--worker_command needs a chief (--chief): a Python worker cannot act as one");
  }
  if (!options.evaluator_command.empty() && !options.with_chief) {
    return absl::InvalidArgumentError(
        "--evaluator_command needs a chief (--chief): the evaluator reports to it");
  }
  if (!options.ps_link_rate.empty() && !IsTcRate(options.ps_link_rate)) {
    return absl::InvalidArgumentError(absl::StrCat("--ps_link_rate=", options.ps_link_rate,
                                                   " is not a tc rate such as 1gbit or 500mbit"));
  }
  return absl::OkStatus();
}

common::TfConfig LocalClusterShape(const LocalClusterOptions& options) {
  common::TfConfig tf;
  auto add = [&](std::vector<std::string>* list, int n, const char* type) {
    for (int i = 0; i < n; ++i) list->push_back(absl::StrCat(type, "-", i, ":1"));
  };
  add(&tf.cluster.chief, options.with_chief ? 1 : 0, "chief");
  add(&tf.cluster.ps, options.num_ps, "ps");
  add(&tf.cluster.worker, options.num_workers, "worker");
  add(&tf.cluster.evaluator, options.with_evaluator || !options.evaluator_command.empty() ? 1 : 0,
      "evaluator");
  tf.task = tf.cluster.CoordinatorTask();
  return tf;
}

int RunLocalCluster(const LocalClusterOptions& options, common::StopSignal* stop) {
  if (absl::Status s = CheckLocalClusterOptions(options); !s.ok()) {
    std::fprintf(stderr, "pstrain local: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const int evaluators = options.with_evaluator || !options.evaluator_command.empty() ? 1 : 0;
  const common::ProgressMode progress =
      common::ResolveProgressMode(options.progress, STDOUT_FILENO);
  Console console(progress == common::ProgressMode::kTty);

  // The cluster spec: a distinct free port per task.
  common::TfConfig tf;
  const int chiefs = options.with_chief ? 1 : 0;
  absl::StatusOr<std::vector<int>> ports =
      PickFreePorts(chiefs + options.num_ps + options.num_workers + evaluators);
  if (!ports.ok()) {
    std::fprintf(stderr, "pstrain local: %s\n", std::string(ports.status().message()).c_str());
    return 2;
  }
  size_t next = 0;
  auto add = [&](std::vector<std::string>* list, int n) {
    for (int i = 0; i < n; ++i) list->push_back(absl::StrCat(options.host, ":", (*ports)[next++]));
  };
  add(&tf.cluster.chief, chiefs);
  add(&tf.cluster.ps, options.num_ps);
  add(&tf.cluster.worker, options.num_workers);
  add(&tf.cluster.evaluator, evaluators);
  // Each ps behind a shaped link: its address is inside its namespace.
  std::vector<std::unique_ptr<ShapedLink>> links;
  if (!options.ps_link_rate.empty()) {
    // Only replicated ps talk to one another: only they need this machine
    // to forward between their links (an iptables rule and ip_forward).
    const bool routed = FlagValue(options.daemon_flags, "ps_replicas") == "2";
    for (int i = 0; i < options.num_ps; ++i) {
      absl::StatusOr<std::unique_ptr<ShapedLink>> link =
          ShapedLink::Create(options.ps_link_rate, routed);
      if (!link.ok()) {
        std::fprintf(stderr, "pstrain local: --ps_link_rate: %s\n",
                     std::string(link.status().message()).c_str());
        return 2;
      }
      tf.cluster.ps[i] = absl::StrCat((*link)->address(), ":", (*ports)[chiefs + i]);
      links.push_back(*std::move(link));
    }
    console.Print(absl::StrCat("pstrain local: each ps behind a link of ", options.ps_link_rate,
                               " each way, in a network namespace of its own"));
  }
  console.Print(absl::StrCat(
      "pstrain local: chief [", absl::StrJoin(tf.cluster.chief, ", "), "], ps [",
      absl::StrJoin(tf.cluster.ps, ", "), "], worker [", absl::StrJoin(tf.cluster.worker, ", "),
      "]", evaluators > 0 ? absl::StrCat(", evaluator [", tf.cluster.evaluator[0], "]") : ""));

  // The daemons share this machine's cores: unless told otherwise, each
  // gets an even share of BLAS threads (OpenBLAS would start one per core in
  // every process; on 2 cores that took the demo from 29.9k to 25.6k
  // examples/s).
  std::string blas_threads;
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    blas_threads = std::to_string(std::max(1, cores / (options.num_workers + 1)));
    console.Print(absl::StrCat("pstrain local: OPENBLAS_NUM_THREADS=", blas_threads,
                               " for each daemon (", cores, " cores, ", options.num_workers,
                               " workers and the chief computing; set it to override)"));
  }

  // The build tree's Python package, ahead of the inherited PYTHONPATH.
  std::string python_path;
  if (!options.worker_command.empty() || !options.evaluator_command.empty()) {
    const std::string package = absl::StrCat(options.bin_dir, "/../python");
    struct stat info;
    if (stat(absl::StrCat(package, "/pstrain").c_str(), &info) == 0) python_path = package;
    if (const char* inherited = std::getenv("PYTHONPATH"); inherited != nullptr && *inherited) {
      python_path = python_path.empty() ? inherited : absl::StrCat(python_path, ":", inherited);
    }
  }

  // Start order: ps, chief, workers (all retry until their peers are up).
  struct Launch {
    common::TaskId task;
    const char* binary;
  };
  std::vector<Launch> launches;
  for (int i = 0; i < options.num_ps; ++i)
    launches.push_back({{common::TaskType::kPs, i}, "ps_server"});
  if (options.with_chief) launches.push_back({{common::TaskType::kChief, 0}, "chief"});
  for (int i = 0; i < options.num_workers; ++i) {
    launches.push_back({{common::TaskType::kWorker, i}, "worker"});
  }
  if (evaluators > 0) launches.push_back({{common::TaskType::kEvaluator, 0}, "evaluator"});

  absl::Mutex mu;        // guards children's pid/running/wait_status
  absl::Mutex lines_mu;  // guards children's first_error/last_line
  std::vector<Child> children(launches.size());
  int exit_code = 0;  // guarded by mu
  // The first daemon whose failure ended the job (guarded by mu; -1: none).
  int first_failed = -1;
  // Ends the job from inside: the first reason wins.
  auto end_job = [&](const std::string& reason) {
    {
      absl::MutexLock lock(&mu);
      if (!stop->stopped()) exit_code = 1;
    }
    stop->Stop(reason);
  };
  auto signal_all = [&](int signo) {
    absl::MutexLock lock(&mu);
    for (Child& c : children) {
      if (c.running) kill(c.pid, signo);
    }
  };

  // Starts children[i] from its spawn options, with a thread streaming its
  // output. REQUIRES: mu held, or no other thread running yet.
  auto start = [&](size_t i) -> absl::Status {
    Child& c = children[i];
    int fd = -1;
    absl::StatusOr<pid_t> pid = Spawn(c.spawn, &fd);
    if (!pid.ok()) return pid.status();
    c.pid = *pid;
    c.running = true;
    console.Print(absl::StrCat("pstrain local: started ", c.task, " (pid ", *pid, ")"));
    const std::string prefix =
        absl::StrCat(c.task, std::string(10 - std::min<size_t>(9, c.task.size()), ' '), "| ");
    if (c.reader.joinable()) c.reader.join();  // the previous run's output has ended
    {
      absl::MutexLock lock(&lines_mu);
      c.first_error.clear();
      c.last_line.clear();
    }
    const bool coordinator = c.coordinator;
    c.reader = std::thread([fd, prefix, coordinator, child = &c, &console, &lines_mu] {
      ForEachLine(fd, [&](const std::string& line) {
        {
          absl::MutexLock lock(&lines_mu);
          NoteLine(child, line);
        }
        if (coordinator) {
          console.PrintFromCoordinator(prefix, line);
        } else {
          console.Print(prefix + line);
        }
      });
    });
    return absl::OkStatus();
  };

  for (size_t i = 0; i < launches.size(); ++i) {
    tf.task = launches[i].task;
    const std::string task = common::TaskIdString(tf.task);
    SpawnOptions spawn;
    const std::string& shell_command =
        tf.task.type == common::TaskType::kWorker      ? options.worker_command
        : tf.task.type == common::TaskType::kEvaluator ? options.evaluator_command
                                                       : std::string();
    const bool command = !shell_command.empty();
    spawn.argv = {absl::StrCat(options.bin_dir, "/", launches[i].binary)};
    // exec: the command is the child itself, so that a signal that kills it
    // reaches the supervisor as such (restart_failed), not as sh's exit code.
    if (command) spawn.argv = {"/bin/sh", "-c", "exec " + shell_command};
    const bool linked = tf.task.type == common::TaskType::kPs && !links.empty();
    // "{task}" in a flag is this daemon's task ("worker-1"): its own
    // certificate or token file under per-role security.
    const std::string task_name =
        absl::StrCat(std::string(common::TaskTypeName(tf.task.type)), "-", tf.task.index);
    for (const std::string& flag : options.daemon_flags) {
      if (command) break;  // a command takes no daemon flags
      spawn.argv.push_back(absl::StrReplaceAll(flag, {{"{task}", task_name}}));
    }
    if (!command && tf.task.type == common::TaskType::kWorker &&
        tf.task.index == options.slow_worker) {
      spawn.argv.push_back(absl::StrCat("--step_delay_ms=", options.slow_worker_delay_ms));
    }
    if (options.metrics_port > 0) {
      const int port = options.metrics_port + static_cast<int>(i);
      spawn.argv.push_back(absl::StrCat("--metrics_port=", port));
      console.Print(absl::StrCat("pstrain local: ", task, " metrics at http://", options.host, ":",
                                 port, "/metrics"));
    }
    if (!options.summary_json.empty() && tf.IsCoordinator()) {
      spawn.argv.push_back(absl::StrCat("--summary_json=", options.summary_json));
    }
    if (tf.IsCoordinator()) {
      // Its stderr is our pipe, never a terminal: the live line, if any,
      // is drawn here from its plain progress lines.
      spawn.argv.push_back(progress == common::ProgressMode::kOff ? "--progress=off"
                                                                  : "--progress=plain");
      if (progress == common::ProgressMode::kTty && options.live_log_every_s > 0) {
        spawn.argv.push_back(absl::StrCat("--log_every_s=", options.live_log_every_s));
      }
    }
    if (linked) spawn.argv = links[tf.task.index]->Wrap(std::move(spawn.argv));
    spawn.env = {absl::StrCat("TF_CONFIG=", common::TfConfigToJson(tf))};
    if (!blas_threads.empty()) spawn.env.push_back("OPENBLAS_NUM_THREADS=" + blas_threads);
    if (command) {
      spawn.env.push_back("PSTRAIN_BIN=" + options.bin_dir);
      if (!python_path.empty()) spawn.env.push_back("PYTHONPATH=" + python_path);
      // torch's own threads: one each, as the C++ workers' BLAS.
      if (!blas_threads.empty()) spawn.env.push_back("OMP_NUM_THREADS=" + blas_threads);
      // The connection's security as the daemons' flags give it, and an
      // evaluator's directories and metric.
      for (const CommandEnv& e : kCommandEnv) {
        const std::string value = FlagValue(options.daemon_flags, e.flag);
        if (value.empty() || (e.evaluator_only && tf.task.type != common::TaskType::kEvaluator)) {
          continue;
        }
        spawn.env.push_back(
            absl::StrCat(e.env, "=", absl::StrReplaceAll(value, {{"{task}", task_name}})));
      }
    }
    children[i].task = task;
    children[i].binary = command ? std::string() : std::string(launches[i].binary);
    children[i].coordinator = tf.IsCoordinator();
    children[i].spawn = std::move(spawn);
    absl::Status started = start(i);  // no other thread runs yet
    if (!started.ok()) {
      console.Print(absl::StrCat("pstrain local: cannot start ", task, ": ", started.message()));
      end_job("a daemon could not be started");
      children.resize(i);
      break;
    }
  }

  absl::Notification all_exited;
  // Set when the coordinator exits with success: the job is over. A daemon
  // still running `grace` later (one restarted after the chief had told
  // the ps to shut down) is stopped; nothing is restarted any more, and
  // what exits after it does not fail the job.
  absl::Notification job_ended;
  std::thread straggler_stopper([&] {
    job_ended.WaitForNotification();
    if (all_exited.WaitForNotificationWithTimeout(options.grace)) return;
    console.Print("pstrain local: the chief ended the job; stopping the daemons still running");
    signal_all(SIGTERM);
    if (!all_exited.WaitForNotificationWithTimeout(options.grace)) signal_all(SIGKILL);
  });
  std::thread timer([&] {
    if (options.timeout > absl::ZeroDuration() &&
        !all_exited.WaitForNotificationWithTimeout(options.timeout)) {
      end_job(absl::StrCat("timed out after ", absl::FormatDuration(options.timeout)));
    }
  });
  // Teardown: SIGTERM everyone, SIGKILL whoever outlives the grace period.
  std::thread reaper([&] {
    stop->Wait();
    if (all_exited.HasBeenNotified()) return;
    console.Print(absl::StrCat("pstrain local: ", stop->reason(), "; stopping every daemon"));
    signal_all(SIGTERM);
    if (!all_exited.WaitForNotificationWithTimeout(options.grace)) {
      console.Print("pstrain local: daemons still running after the grace period; killing them");
      signal_all(SIGKILL);
    }
  });

  // Reap children as they exit.
  size_t live = children.size();
  while (live > 0) {
    int wait_status = 0;
    const pid_t pid = waitpid(-1, &wait_status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    absl::MutexLock lock(&mu);
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      if (c.pid != pid || !c.running) continue;
      c.running = false;
      c.wait_status = wait_status;
      const bool ok = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
      const bool after_job = job_ended.HasBeenNotified();
      if (ok && c.coordinator && !after_job) job_ended.Notify();
      if (!ok && !after_job && !stop->stopped() && options.restart_failed &&
          WIFSIGNALED(wait_status) && c.restarts < options.max_restarts) {
        // Like a supervisor's restart on failure: the same task, again.
        ++c.restarts;
        console.Print(absl::StrCat("pstrain local: ", c.task, " ", DescribeWaitStatus(wait_status),
                                   "; restarting it (", c.restarts, " of at most ",
                                   options.max_restarts, ")"));
        absl::Status started = start(i);
        if (started.ok()) break;
        console.Print(
            absl::StrCat("pstrain local: cannot restart ", c.task, ": ", started.message()));
      }
      --live;
      // After the job, a daemon killed by a signal (one the straggler
      // stopper stopped, or killed from outside) has lost nothing.
      if (!ok && !(after_job && WIFSIGNALED(wait_status)) && !stop->stopped()) {
        exit_code = 1;
        first_failed = static_cast<int>(i);
        stop->Stop(absl::StrCat(c.task, " ", DescribeWaitStatus(wait_status)));
      }
    }
  }
  all_exited.Notify();
  const bool stopped_before_end = stop->stopped();
  const std::string stop_reason = stopped_before_end ? stop->reason() : std::string();
  stop->Stop("every daemon exited");                     // releases the reaper
  if (!job_ended.HasBeenNotified()) job_ended.Notify();  // releases the straggler stopper
  straggler_stopper.join();
  timer.join();
  reaper.join();
  for (Child& c : children) {
    if (c.reader.joinable()) c.reader.join();
  }
  console.Finish();
  for (const Child& c : children) {
    console.Print(absl::StrCat("pstrain local: ", c.task, " ", DescribeWaitStatus(c.wait_status)));
  }
  absl::MutexLock lock(&mu);
  if (stopped_before_end && exit_code == 0) return 130;  // stopped from outside
  if (exit_code == 0) {
    console.Print("pstrain local: job succeeded");
    return 0;
  }
  // The error that ended the job, named by its task: what a reader of a
  // long log looks for first.
  std::string why = stop_reason;
  if (first_failed >= 0) {
    absl::MutexLock lines_lock(&lines_mu);
    const Child& failed = children[first_failed];
    why = absl::StrCat(failed.task, ": ", ErrorOf(failed));
  }
  console.Print(why.empty() ? "pstrain local: job failed"
                            : absl::StrCat("pstrain local: job failed: ", why));
  return exit_code;
}

}  // namespace pst::tools
