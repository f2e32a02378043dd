#include "ps_server/in_process_ps.h"

#include "absl/strings/str_cat.h"

namespace pst::ps {
namespace {

// A primary's forwards to ps `to` of `ps`, delivered on the caller's
// thread (to whichever ps is at that index now, as over the network).
class InProcessReplicaLink final : public ReplicaLink {
 public:
  InProcessReplicaLink(const InProcessPs* ps, int to) : ps_(ps), to_(to) {}
  void Send(std::shared_ptr<const proto::ReplicateRequest> request, Done done) override {
    absl::StatusOr<InProcessPs::Server*> server = ps_->Get(to_);
    if (!server.ok()) return done(server.status());
    (*server)->node.Replicate(std::move(request), std::move(done));
  }

 private:
  const InProcessPs* const ps_;
  const int to_;
};

PsNode::Options NodeOptions(const InProcessPs* ps, int index, uint64_t incarnation,
                            const InProcessPs::Options& options) {
  PsNode::Options node;
  node.ps_index = index;
  node.task = absl::StrCat("ps-", index);
  node.incarnation = incarnation;
  node.checkpoint_dir = options.checkpoint_dir;
  node.store_options = options.store;
  const int num_ps = ps->num_ps();
  node.link_to = [ps, num_ps](int to) -> std::unique_ptr<ReplicaLink> {
    if (to < 0 || to >= num_ps) return nullptr;
    return std::make_unique<InProcessReplicaLink>(ps, to);
  };
  return node;
}

}  // namespace

InProcessPs::Server::Server(const InProcessPs* ps, int index, uint64_t incarnation,
                            const Options& options)
    : store(options.store), node(&store, NodeOptions(ps, index, incarnation, options)) {}

InProcessPs::InProcessPs(int num_ps, Options options)
    : num_ps_(num_ps), options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < num_ps; ++i) {
    servers_.push_back(std::make_unique<Server>(this, i, IncarnationOf(i, 0), options_));
  }
  restarts_.assign(num_ps, 0);
  down_.assign(num_ps, false);
}

InProcessPs::~InProcessPs() {
  // Saves and restores finish before their stores go.
  absl::MutexLock lock(&mu_);
  for (auto& s : servers_) s->node.StopBackgroundWork();
  for (auto& s : retired_) s->node.StopBackgroundWork();
}

uint64_t InProcessPs::IncarnationOf(int index, int restarts) {
  return 1000 * static_cast<uint64_t>(restarts + 1) + static_cast<uint64_t>(index);
}

absl::StatusOr<InProcessPs::Server*> InProcessPs::Get(int index) const {
  absl::MutexLock lock(&mu_);
  if (down_[index])
    return absl::UnavailableError(absl::StrCat("in-process ps ", index, " is down"));
  return servers_[index].get();
}

InProcessPs::Server* InProcessPs::server(int index) const {
  absl::MutexLock lock(&mu_);
  return servers_[index].get();
}

void InProcessPs::Restart(int index) {
  Server* old;
  {
    absl::MutexLock lock(&mu_);
    old = servers_[index].get();
    retired_.push_back(std::move(servers_[index]));
    servers_[index] =
        std::make_unique<Server>(this, index, IncarnationOf(index, ++restarts_[index]), options_);
  }
  for (const auto& store : old->node.PrimaryStores()) {
    store->CancelAllWaiters(
        absl::UnavailableError(absl::StrCat("in-process ps ", index, " was restarted")));
  }
}

void InProcessPs::SetDown(int index, bool down) {
  absl::MutexLock lock(&mu_);
  down_[index] = down;
}

}  // namespace pst::ps
