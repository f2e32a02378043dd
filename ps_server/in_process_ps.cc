#include "ps_server/in_process_ps.h"

#include "absl/strings/str_cat.h"

namespace pst::ps {
namespace {

PsNode::Options NodeOptions(int index, uint64_t incarnation, const InProcessPs::Options& options) {
  PsNode::Options node;
  node.ps_index = index;
  node.task = absl::StrCat("ps-", index);
  node.incarnation = incarnation;
  node.checkpoint_dir = options.checkpoint_dir;
  return node;
}

}  // namespace

InProcessPs::Server::Server(int index, uint64_t incarnation, const Options& options)
    : store(options.store), node(&store, NodeOptions(index, incarnation, options)) {}

InProcessPs::InProcessPs(int num_ps, Options options)
    : num_ps_(num_ps), options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < num_ps; ++i) {
    servers_.push_back(std::make_unique<Server>(i, IncarnationOf(i, 0), options_));
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
        std::make_unique<Server>(index, IncarnationOf(index, ++restarts_[index]), options_);
  }
  old->store.CancelAllWaiters(
      absl::UnavailableError(absl::StrCat("in-process ps ", index, " was restarted")));
}

void InProcessPs::SetDown(int index, bool down) {
  absl::MutexLock lock(&mu_);
  down_[index] = down;
}

}  // namespace pst::ps
