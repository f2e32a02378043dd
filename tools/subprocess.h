// Child processes for the launcher and the integration tests: started with
// fork/execve, their stdout and stderr captured through a pipe, ended with
// SIGTERM then SIGKILL. Children get PR_SET_PDEATHSIG=SIGTERM, so they are
// told to exit even if the parent is killed with SIGKILL.
#ifndef PST_TOOLS_SUBPROCESS_H_
#define PST_TOOLS_SUBPROCESS_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pst::tools {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path
  std::vector<std::string> env;   // "NAME=value" added to (or replacing in) the parent's env
  // >= 0: given to the child as its file descriptor 3 (a channel of its
  // own, apart from the captured output); the caller keeps and closes it.
  int pass_fd = -1;
};

// Starts the child. `*output_fd` receives the read end of a pipe carrying the
// child's stdout and stderr; the caller reads and closes it.
// Errors: Internal naming the program when pipe or fork fails. An exec
// failure shows up as exit status 127 with a message on the pipe.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options, int* output_fd);

// Reads `fd` line by line until EOF, calling `on_line` for each line
// (without its newline); closes `fd`.
void ForEachLine(int fd, const std::function<void(const std::string&)>& on_line);

// `count` distinct free TCP ports on 127.0.0.1, as the kernel picks them:
// every socket stays bound until all are picked, so no port comes twice.
// Another process may take one before it is used; callers bind promptly.
absl::StatusOr<std::vector<int>> PickFreePorts(int count);

// Runs `command` with /bin/sh -c and waits for it. Its stdout and stderr
// together, or, when it does not exit with status 0, Internal naming the
// command, how it ended and what it printed.
absl::StatusOr<std::string> RunShell(const std::string& command);

// "exited with status 3", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

// The directory holding this executable (from /proc/self/exe).
std::string ExecutableDir();

}  // namespace pst::tools

#endif  // PST_TOOLS_SUBPROCESS_H_
