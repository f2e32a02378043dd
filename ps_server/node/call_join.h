// One call's answer made of several parts that finish on their own (a push
// and its forward to the backup; a change to each shard a ps serves): the
// call is answered once every part has reported, with the first error any
// reported (OK if none did). Thread-safe.
#ifndef PST_PS_SERVER_NODE_CALL_JOIN_H_
#define PST_PS_SERVER_NODE_CALL_JOIN_H_

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pst::ps {

class CallJoin {
 public:
  using Done = std::function<void(absl::Status)>;
  CallJoin(int parts, Done done) : left_(parts), done_(std::move(done)) {}

  // One part is done with `status`; the last one runs `done`.
  void Part(absl::Status status) {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      if (status_.ok()) status_ = std::move(status);
      last = --left_ == 0;
    }
    if (last) done_(status_);
  }

  // The first error reported so far (OK: none).
  absl::Status first_error() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  const Done done_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_NODE_CALL_JOIN_H_
