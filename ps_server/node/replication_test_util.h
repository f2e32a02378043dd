// Test helpers for replicated shards (replication_test.cc, resync_test.cc):
// a link that holds forwards until delivered and a wait for a call's
// completion, beside the specs and pushes of store/store_test_util.h.
#ifndef PST_PS_SERVER_NODE_REPLICATION_TEST_UTIL_H_
#define PST_PS_SERVER_NODE_REPLICATION_TEST_UTIL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/pstrain.pb.h"
#include "ps_server/node/ps_node.h"
#include "ps_server/replication/replica_source.h"
#include "ps_server/store/store_test_util.h"

namespace pst::ps::testing_util {

using Done = PsNode::Done;

// Holds each forward until it is delivered: by Deliver(i), or by a thread
// that delivers pending forwards in a random order (Shuffle()).
class HeldLink : public ReplicaLink {
 public:
  using Target = std::function<void(std::shared_ptr<const proto::ReplicateRequest>, Done)>;
  explicit HeldLink(Target target) : target_(std::move(target)) {}
  ~HeldLink() override { StopShuffling(); }

  void Send(std::shared_ptr<const proto::ReplicateRequest> request, Done done) override {
    bool now = false, fail = false;
    {
      absl::MutexLock lock(&mu_);
      fail = fail_;
      now = !fail && !hold_;
      if (!fail) ++sent_;
      if (!fail && !now) pending_.push_back({request, std::move(done)});
    }
    if (fail) done(absl::UnavailableError("backup gone"));
    if (now) target_(std::move(request), std::move(done));
  }
  // While held, forwards wait for Deliver or the shuffling thread; else
  // they are delivered at once, in order.
  void Hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  int pending() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(pending_.size());
  }
  int sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  // Delivers pending forward `i`; false if there is none.
  bool Deliver(size_t i) {
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      if (i >= pending_.size()) return false;
      p = std::move(pending_[i]);
      pending_.erase(pending_.begin() + static_cast<long>(i));
    }
    target_(p.request, p.done);
    return true;
  }
  void DeliverAll() {
    while (Deliver(0)) {
    }
  }
  // From now on, every forward fails as if the backup were gone; those
  // pending fail now.
  void Fail() {
    std::deque<Pending> failed;
    {
      absl::MutexLock lock(&mu_);
      fail_ = true;
      failed.swap(pending_);
    }
    for (Pending& p : failed) p.done(absl::UnavailableError("backup gone"));
  }
  void Shuffle(uint32_t seed) {
    Hold(true);
    shuffler_ = std::thread([this, seed] {
      std::mt19937 rng(seed);
      while (!stop_.load()) {
        size_t n;
        {
          absl::MutexLock lock(&mu_);
          auto has = [this] { return !pending_.empty() || stop_.load(); };
          mu_.AwaitWithTimeout(absl::Condition(&has), absl::Milliseconds(20));
          n = pending_.size();
        }
        if (n > 0) Deliver(std::uniform_int_distribution<size_t>(0, n - 1)(rng));
      }
    });
  }
  void StopShuffling() {
    stop_.store(true);
    if (shuffler_.joinable()) shuffler_.join();
    DeliverAll();
    Hold(false);
  }

 private:
  struct Pending {
    std::shared_ptr<const proto::ReplicateRequest> request;
    Done done;
  };
  const Target target_;
  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};
  std::thread shuffler_;
};

// A ReplicaLink that sends through a HeldLink it shares with the test: the
// test can still reach (deliver, fail) the HeldLink after the source has
// let go of its link.
class SharedLink : public ReplicaLink {
 public:
  explicit SharedLink(std::shared_ptr<HeldLink> link) : link_(std::move(link)) {}
  void Send(std::shared_ptr<const proto::ReplicateRequest> request, Done done) override {
    link_->Send(std::move(request), std::move(done));
  }

 private:
  const std::shared_ptr<HeldLink> link_;
};

// Runs `call` and waits for its completion.
template <typename Call>
absl::Status Await(Call call) {
  absl::Notification n;
  absl::Status status;
  call([&](absl::Status s) {
    status = std::move(s);
    n.Notify();
  });
  n.WaitForNotification();
  return status;
}

}  // namespace pst::ps::testing_util

#endif  // PST_PS_SERVER_NODE_REPLICATION_TEST_UTIL_H_
