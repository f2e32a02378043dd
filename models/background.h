// Background: one job at a time on a thread of its own. The training loops
// use it for the push+pull they overlap with compute (--overlap) and for
// prefetching the next batch to the devices.
#ifndef PST_MODELS_BACKGROUND_H_
#define PST_MODELS_BACKGROUND_H_

#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pst::models {

// Thread-safety: Start and Wait from one thread (the owner).
class Background {
 public:
  Background() : thread_([this] { Loop(); }) {}
  ~Background() {
    {
      absl::MutexLock lock(&mu_);
      quit_ = true;
    }
    thread_.join();
  }
  // REQUIRES: no job running (Wait() returned since the last Start()).
  void Start(std::function<void()> job) {
    absl::MutexLock lock(&mu_);
    job_ = std::move(job);
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](std::function<void()>* job) { return !*job; }, &job_));
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Background* b) { return b->quit_ || static_cast<bool>(b->job_); }, this));
        if (!job_) return;  // quit with nothing to do
        job = job_;
      }
      job();
      absl::MutexLock lock(&mu_);
      job_ = nullptr;
    }
  }

  absl::Mutex mu_;
  std::function<void()> job_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pst::models

#endif  // PST_MODELS_BACKGROUND_H_
