#include "tools/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace pst::tools {

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options, int* output_fd) {
  if (options.argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");
  // Build argv and envp before fork: the child may only make
  // async-signal-safe calls between fork and exec.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : options.env) {
      if (add.substr(0, add.find('=')) == name) replaced = true;
    }
    if (!replaced) env_strings.push_back(entry);
  }
  for (const std::string& add : options.env) env_strings.push_back(add);
  std::vector<char*> argv, envp;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork ", options.argv[0], ": ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (options.pass_fd >= 0) {
      // dup2 onto itself keeps close-on-exec, so clear it there.
      if (options.pass_fd == 3) {
        fcntl(3, F_SETFD, 0);
      } else {
        dup2(options.pass_fd, 3);
      }
    }
    execve(argv[0], argv.data(), envp.data());
    const char msg[] = "exec failed: ";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  close(fds[1]);
  *output_fd = fds[0];
  return pid;
}

void ForEachLine(int fd, const std::function<void(const std::string&)>& on_line) {
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      on_line(pending.substr(start, nl - start));
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) on_line(pending);
  close(fd);
}

absl::StatusOr<std::vector<int>> PickFreePorts(int count) {
  std::vector<int> fds, ports;
  absl::Status status;
  for (int i = 0; i < count && status.ok(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = absl::InternalError(absl::StrCat("picking a free port: ", std::strerror(errno)));
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  if (!status.ok()) return status;
  return ports;
}

absl::StatusOr<std::string> RunShell(const std::string& command) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", command};
  int fd = -1;
  absl::StatusOr<pid_t> pid = Spawn(options, &fd);
  if (!pid.ok()) return pid.status();
  std::string output;
  ForEachLine(fd, [&output](const std::string& line) { absl::StrAppend(&output, line, "\n"); });
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return output;
  const absl::string_view said = absl::StripTrailingAsciiWhitespace(output);
  return absl::InternalError(absl::StrCat("'", command, "' ", DescribeWaitStatus(status),
                                          said.empty() ? ", printing nothing" : ": ", said));
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrCat("killed by signal ", sig, " (", strsignal(sig), ")");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

}  // namespace pst::tools
