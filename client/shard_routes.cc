#include "client/shard_routes.h"

#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pst::client {

ShardRoutes::ShardRoutes(int num_shards, bool replicated)
    : replicated_(replicated), ps_(static_cast<size_t>(num_shards)) {
  for (int g = 0; g < num_shards; ++g) ps_[g].store(g, std::memory_order_relaxed);
}

std::shared_ptr<ShardRoutes> ShardRoutes::FromPlan(const proto::PlacementPlan& plan,
                                                   int64_t version) {
  const bool replicated = plan.replicas() == 2;
  auto routes = std::make_shared<ShardRoutes>(plan.num_ps(), replicated);
  if (replicated) routes->Set(version, plan.shards());
  return routes;
}

bool ShardRoutes::AwaitMove(int shard, int from, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto moved = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !hold_ || PsOf(shard) != from; };
  mu_.AwaitWithDeadline(absl::Condition(&moved), deadline);
  return PsOf(shard) != from;
}

void ShardRoutes::SetHold(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_ = hold;
}

bool ShardRoutes::Set(int64_t version,
                      const google::protobuf::RepeatedPtrField<proto::ShardCopies>& shards) {
  absl::MutexLock lock(&mu_);
  if (version < version_.load(std::memory_order_acquire)) return false;
  bool changed = false;
  for (int g = 0; g < shards.size() && g < num_shards(); ++g) {
    const int ps = shards[g].primary();
    if (ps < 0 || ps >= num_shards()) continue;
    changed |= ps_[g].exchange(ps, std::memory_order_acq_rel) != ps;
  }
  version_.store(version, std::memory_order_release);
  return changed;
}

namespace {

// Whether a call failed the way a call to a lost ps fails (see the file
// comment).
bool FailedAsALostPs(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

// One call to a shard: sent to its primary, and sent again, the same
// request, to the new primary when the shard moves after a failure.
class Attempt : public std::enable_shared_from_this<Attempt> {
 public:
  using Send = std::function<void(int ps, common::PsTransport::Done done)>;
  Attempt(std::shared_ptr<const ShardRoutes> routes, int shard, Send send,
          common::PsTransport::Done done)
      : routes_(std::move(routes)), shard_(shard), send_(std::move(send)), done_(std::move(done)) {}

  void Go() {
    const int ps = routes_->PsOf(shard_);
    send_(ps, [self = shared_from_this(), ps](absl::Status status) {
      self->After(ps, std::move(status));
    });
  }

 private:
  void After(int ps, absl::Status status) {
    if (status.ok() || !routes_->replicated() || !FailedAsALostPs(status)) {
      done_(std::move(status));
      return;
    }
    if (deadline_ == absl::InfiniteFuture()) deadline_ = absl::Now() + ShardRoutes::kRerouteWait;
    // Waits off the transport's callback thread (a lost ps is rare).
    std::thread([self = shared_from_this(), ps, status = std::move(status)]() mutable {
      if (self->routes_->AwaitMove(self->shard_, ps, self->deadline_)) {
        self->Go();
      } else {
        self->done_(std::move(status));
      }
    }).detach();
  }

  const std::shared_ptr<const ShardRoutes> routes_;
  const int shard_;
  const Send send_;
  common::PsTransport::Done done_;
  absl::Time deadline_ = absl::InfiniteFuture();
};

class RoutedTransport final : public common::PsTransport {
 public:
  RoutedTransport(std::shared_ptr<common::PsTransport> base,
                  std::shared_ptr<const ShardRoutes> routes)
      : base_(std::move(base)), routes_(std::move(routes)) {}

  int num_ps() const override { return routes_->num_shards(); }
  void Pull(int shard, const proto::PullRequest* request, proto::PullResponse* response,
            Done done) override {
    Route(shard, std::move(done), [base = base_, request, response](int ps, Done d) {
      base->Pull(ps, request, response, std::move(d));
    });
  }
  void Push(int shard, const proto::PushRequest* request, proto::PushResponse* response,
            Done done) override {
    Route(shard, std::move(done), [base = base_, request, response](int ps, Done d) {
      base->Push(ps, request, response, std::move(d));
    });
  }
  void PushPull(int shard, const proto::PushPullRequest* request, proto::PullResponse* response,
                Done done) override {
    Route(shard, std::move(done), [base = base_, request, response](int ps, Done d) {
      base->PushPull(ps, request, response, std::move(d));
    });
  }
  void PullRows(int shard, const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                Done done) override {
    Route(shard, std::move(done), [base = base_, request, response](int ps, Done d) {
      base->PullRows(ps, request, response, std::move(d));
    });
  }
  void PushRows(int shard, const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                Done done) override {
    Route(shard, std::move(done), [base = base_, request, response](int ps, Done d) {
      base->PushRows(ps, request, response, std::move(d));
    });
  }
  std::string Describe(int shard) const override {
    const int ps = routes_->PsOf(shard);
    return ps == shard ? base_->Describe(ps)
                       : absl::StrCat("shard ", shard, " on ", base_->Describe(ps));
  }
  void PullDense(int shard, const proto::PullRequest* request, const common::DenseBuffers* buffers,
                 proto::PullResponse* response, Done done) override {
    Route(shard, std::move(done), [base = base_, request, buffers, response](int ps, Done d) {
      base->PullDense(ps, request, buffers, response, std::move(d));
    });
  }
  void PushPullDense(int shard, const proto::PushPullRequest* request,
                     const common::DenseBuffers* buffers, proto::PullResponse* response,
                     Done done) override {
    Route(shard, std::move(done), [base = base_, request, buffers, response](int ps, Done d) {
      base->PushPullDense(ps, request, buffers, response, std::move(d));
    });
  }
  void PushDense(int shard, const proto::PushRequest* request, const common::DenseBuffers* buffers,
                 proto::PushResponse* response, Done done) override {
    Route(shard, std::move(done), [base = base_, request, buffers, response](int ps, Done d) {
      base->PushDense(ps, request, buffers, response, std::move(d));
    });
  }

 private:
  void Route(int shard, Done done, Attempt::Send send) {
    if (!routes_->replicated()) {
      send(shard, std::move(done));
      return;
    }
    std::make_shared<Attempt>(routes_, shard, std::move(send), std::move(done))->Go();
  }

  const std::shared_ptr<common::PsTransport> base_;
  const std::shared_ptr<const ShardRoutes> routes_;
};

}  // namespace

std::unique_ptr<common::PsTransport> MakeRoutedTransport(
    std::shared_ptr<common::PsTransport> base, std::shared_ptr<const ShardRoutes> routes) {
  return std::make_unique<RoutedTransport>(std::move(base), std::move(routes));
}

}  // namespace pst::client
