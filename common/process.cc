#include "common/process.h"

#include <signal.h>

#include <random>
#include <thread>

namespace pst::common {

void HandleTerminationSignals(std::function<void(int)> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)] {
    for (;;) {
      int signo = 0;
      if (sigwait(&set, &signo) == 0) on_signal(signo);
    }
  }).detach();
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

}  // namespace pst::common
