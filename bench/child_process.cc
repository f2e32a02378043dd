#include "bench/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pst::bench {
namespace {

constexpr size_t kTailLines = 20;

// Waits up to `timeout` for child `pid` to exit; its wait status, or nullopt.
std::optional<int> WaitChild(pid_t pid, absl::Duration timeout) {
  if (timeout > absl::ZeroDuration()) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
      close(fd);
    }
  }
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == pid) return status;
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const tools::SpawnOptions& spawn, std::string label, bool echo) {
  int fd = -1;
  absl::StatusOr<pid_t> pid = tools::Spawn(spawn, &fd);
  if (!pid.ok()) return pid.status();
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = *pid;
  child->label_ = std::move(label);
  ChildProcess* c = child.get();
  c->reader_ = std::thread([c, fd, echo] {
    tools::ForEachLine(fd, [c, echo](const std::string& line) {
      if (echo) std::fprintf(stderr, "[%s] %s\n", c->label_.c_str(), line.c_str());
      absl::MutexLock lock(&c->mu_);
      c->tail_.push_back(line);
      if (c->tail_.size() > kTailLines) c->tail_.pop_front();
    });
  });
  return child;
}

ChildProcess::~ChildProcess() { Stop(absl::ZeroDuration()); }

std::string ChildProcess::Tail() {
  absl::MutexLock lock(&mu_);
  if (tail_.empty()) return "";
  return absl::StrCat("; its last output:\n  ", absl::StrJoin(tail_, "\n  "));
}

std::optional<int> ChildProcess::Poll() {
  if (!wait_status_.has_value()) wait_status_ = WaitChild(pid_, absl::ZeroDuration());
  return wait_status_;
}

std::string ChildProcess::DescribeExit() {
  const std::optional<int> status = Poll();
  if (!status.has_value()) return "";
  if (reader_.joinable()) reader_.join();  // its output ends with it: read it all
  return absl::StrCat(label_, " (pid ", pid_, ") ", tools::DescribeWaitStatus(*status), Tail());
}

int ChildProcess::Stop(absl::Duration grace) {
  if (!wait_status_.has_value()) wait_status_ = WaitChild(pid_, grace);
  if (!wait_status_.has_value()) {
    if (grace > absl::ZeroDuration()) {
      std::fprintf(stderr, "ps_bench: %s did not exit; SIGTERM\n", label_.c_str());
    }
    kill(pid_, SIGTERM);
    wait_status_ = WaitChild(pid_, absl::Seconds(5));
  }
  if (!wait_status_.has_value()) {
    std::fprintf(stderr, "ps_bench: %s ignored SIGTERM; SIGKILL\n", label_.c_str());
    kill(pid_, SIGKILL);
    int s = 0;
    while (waitpid(pid_, &s, 0) < 0 && errno == EINTR) {
    }
    wait_status_ = s;
  }
  if (reader_.joinable()) reader_.join();
  return *wait_status_;
}

}  // namespace pst::bench
