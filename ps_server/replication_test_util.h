// Test helpers for replicated shards (replication_test.cc, resync_test.cc):
// a link that holds forwards until delivered, variable specs, pushes, and a
// wait for a call's completion.
#ifndef PST_PS_SERVER_REPLICATION_TEST_UTIL_H_
#define PST_PS_SERVER_REPLICATION_TEST_UTIL_H_

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
#include "common/tensor_util.h"
#include "proto/pstrain.pb.h"
#include "ps_server/ps_node.h"
#include "ps_server/replica_source.h"

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

inline proto::VariableSpec Dense(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(0.5f);
  spec.mutable_initializer()->set_seed(7);
  return spec;
}

inline proto::VariableSpec Hash(const std::string& name, int64_t dim, int admit_after) {
  proto::VariableSpec spec = Dense(name + "/part_0", {0, dim});
  spec.set_variable(name);
  spec.set_partition(0);
  spec.set_num_partitions(1);
  spec.set_routing(proto::HASH);
  spec.set_admit_after(admit_after);
  return spec;
}

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

// Adam, as every replication test's shards use it.
inline proto::OptimizerConfig Adam() {
  proto::OptimizerConfig adam;
  adam.set_name("adam");
  adam.set_learning_rate(0.01f);
  adam.set_beta1(0.9f);
  adam.set_beta2(0.999f);
  adam.set_epsilon(1e-7f);
  return adam;
}

// Adds a gradient of `shape` for `name` to `push`, drawn in [-1, 1).
inline void AddGradient(proto::PushRequest* push, const std::string& name,
                        const std::vector<int64_t>& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> g(static_cast<size_t>(n));
  for (float& x : g) x = u(rng);
  push->add_names(name);
  common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push->add_gradients());
}

// A push of worker `worker` (incarnation 100 + worker) at `step`, with a
// random gradient of `shape` for `name`.
inline proto::PushRequest PushOf(const std::string& name, const std::vector<int64_t>& shape,
                                 int worker, int64_t step, std::mt19937& rng) {
  proto::PushRequest push;
  push.set_worker_index(worker);
  push.set_incarnation(100 + worker);
  push.set_step(step);
  push.set_position(step);
  AddGradient(&push, name, shape, rng);
  return push;
}

// A push of dense "w" [16, 8] and "b" [8].
inline proto::PushRequest DensePush(int worker, int64_t step, std::mt19937& rng) {
  proto::PushRequest push = PushOf("w", {16, 8}, worker, step, rng);
  AddGradient(&push, "b", {8}, rng);
  return push;
}

inline proto::PushRowsRequest RowPush(int worker, int64_t step, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> id(0, 40);
  std::uniform_real_distribution<float> u(-1, 1);
  proto::PushRowsRequest push;
  push.set_worker_index(worker);
  push.set_incarnation(100 + worker);
  push.set_step(step);
  proto::RowIds* rows = push.add_rows();
  rows->set_name("emb/part_0");
  while (rows->ids_size() < 6) {
    const int64_t x = id(rng);
    bool seen = false;
    for (int64_t y : rows->ids()) seen |= y == x;
    if (!seen) rows->add_ids(x);
  }
  std::vector<float> g(6 * 4);
  for (float& x : g) x = u(rng);
  const std::vector<int64_t> shape = {6, 4};
  common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push.add_gradients());
  return push;
}

}  // namespace pst::ps::testing_util

#endif  // PST_PS_SERVER_REPLICATION_TEST_UTIL_H_
