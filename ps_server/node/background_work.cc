#include "ps_server/node/background_work.h"

#include <exception>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pst::ps {

BackgroundWork::~BackgroundWork() { Stop(); }

absl::Status BackgroundWork::Start(const std::string& what, std::function<absl::Status()> work,
                                   std::function<void(absl::Status)> finish) {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (stopping_) {
    return absl::UnavailableError(absl::StrCat("the ps is shutting down: no new ", what));
  }
  if (running_ >= limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the ps is already running ", running_, " save(s) or restore(s), its limit; ", what,
        " again when they are done"));
  }
  ++running_;
  jobs_.emplace_back();
  Job* job = &jobs_.back();
  job->thread = std::thread([this, job, what, work = std::move(work),
                             finish = std::move(finish)] {
    absl::Status status;
    try {
      status = work();
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError(absl::StrCat("the ps ran out of memory in the ", what));
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat(what, ": ", e.what()));
    }
    {
      // The work is over: its slot is free before its caller hears back,
      // so a caller that sends the next request at once is not refused.
      absl::MutexLock lock(&mu_);
      --running_;
    }
    try {
      finish(status);
    } catch (...) {
      // finish only finishes a call; nothing to report to.
    }
    absl::MutexLock lock(&mu_);
    job->done = true;
  });
  return absl::OkStatus();
}

void BackgroundWork::ReapLocked() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->done) {
      it->thread.join();  // it has finished, or is about to return
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void BackgroundWork::Stop() {
  std::list<Job> jobs;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &running_));
    jobs.swap(jobs_);
  }
  for (Job& job : jobs) job.thread.join();
}

int BackgroundWork::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

}  // namespace pst::ps
