#include "common/process.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace pst::common {

namespace {

// The write end of the pipe the signal handler reports to.
int signal_pipe_write = -1;

void OnSignal(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  (void)!write(signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

}  // namespace

void StopOnTerminationSignals(std::string why) {
  // A handler (not sigwait) so that whichever thread the kernel picks, a
  // library's thread pool included, the signal reaches us; it only writes
  // the signal number to a pipe that an ordinary thread reads.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  // The handler must never block: it may run on the reading thread itself.
  // With the pipe full (a storm of signals), a dropped byte loses nothing.
  fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
  signal_pipe_write = fds[1];
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::thread([read_fd = fds[0], why = std::move(why)] {
    for (;;) {
      unsigned char byte = 0;
      const ssize_t n = read(read_fd, &byte, 1);
      if (n == 1) {
        ProcessStopSignal().Stop(absl::StrCat(why, " ", static_cast<int>(byte)));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return;
      }
    }
  }).detach();
}

int64_t PeakResidentBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmHWM:")) continue;
    rest = absl::StripLeadingAsciiWhitespace(rest);
    int64_t kb = 0;
    if (!absl::ConsumeSuffix(&rest, " kB") || !absl::SimpleAtoi(rest, &kb)) return -1;
    return kb * 1024;
  }
  return -1;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return id;
}

void StopSignal::Stop(std::string reason) {
  absl::MutexLock lock(&mu_);
  if (done_.HasBeenNotified()) return;
  reason_ = std::move(reason);
  done_.Notify();
}

std::string StopSignal::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

void TuneForServing() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
  mallopt(M_ARENA_MAX, 2);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

StopSignal& ProcessStopSignal() {
  static StopSignal* const stop = new StopSignal;
  return *stop;
}

}  // namespace pst::common
