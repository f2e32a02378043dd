// PsNode's shards (ps_node.h): which primary serves a request, and the
// roles the chief sets in a replicated job (promoting backup copies after
// a failover).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "ps_server/ps_node.h"

namespace pst::ps {

std::shared_ptr<PsNode::Primary> PsNode::PrimaryFor(const std::string& name) const {
  // Every request asks: without a promoted shard (nearly always) the answer
  // needs no lock.
  if (!any_promoted_.load(std::memory_order_acquire)) return own_;
  absl::MutexLock lock(&primaries_mu_);
  for (const std::shared_ptr<Primary>& p : promoted_) {
    if (p->store->Holds(name)) return p;
  }
  return own_;
}

std::shared_ptr<PsNode::Primary> PsNode::PrimaryOfShard(int shard) const {
  if (shard == options_.ps_index) return own_;
  absl::MutexLock lock(&primaries_mu_);
  for (const std::shared_ptr<Primary>& p : promoted_) {
    if (p->shard == shard) return p;
  }
  return nullptr;
}

std::vector<std::shared_ptr<PsNode::Primary>> PsNode::Primaries() const {
  std::vector<std::shared_ptr<Primary>> all = {own_};
  absl::MutexLock lock(&primaries_mu_);
  all.insert(all.end(), promoted_.begin(), promoted_.end());
  return all;
}

std::shared_ptr<VariableStore> PsNode::StoreFor(const std::string& name) const {
  return PrimaryFor(name)->store;
}

std::vector<std::shared_ptr<VariableStore>> PsNode::PrimaryStores() const {
  std::vector<std::shared_ptr<VariableStore>> stores;
  for (const std::shared_ptr<Primary>& p : Primaries()) stores.push_back(p->store);
  return stores;
}

void PsNode::SetRoles(const proto::RolesRequest* request, proto::RolesResponse* response,
                      Done done) {
  const int me = options_.ps_index;
  std::vector<std::shared_ptr<Primary>> dropped;
  absl::Status status = [&]() -> absl::Status {
    absl::MutexLock lock(&primaries_mu_);
    if (request->version() < roles_version_) {
      return absl::FailedPreconditionError(absl::StrCat("roles of version ", request->version(),
                                                        " are older than those taken (",
                                                        roles_version_, ")"));
    }
    // Shards to serve here that are not served yet: every copy is checked
    // before any is promoted.
    std::vector<int> promote;
    for (int g = 0; g < request->shards_size(); ++g) {
      if (request->shards(g).primary() != me || g == me) continue;
      bool served = false;
      for (const auto& p : promoted_) served |= p->shard == g;
      if (!served) promote.push_back(g);
    }
    for (int g : promote) PST_RETURN_IF_ERROR(backups_.CanTake(g));
    for (int g : promote) {
      PST_ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store, backups_.Take(g));
      auto source = std::make_unique<ReplicaSource>(g, options_.incarnation);
      source->MarkPromoted();
      promoted_.push_back(
          std::make_shared<Primary>(Primary{g, std::move(store), std::move(source), true}));
      spdlog::warn("serving shard {} as its primary: its backup copy here is promoted", g);
    }
    any_promoted_.store(!promoted_.empty(), std::memory_order_release);
    // Promoted shards that are not this ps's any more.
    for (auto it = promoted_.begin(); it != promoted_.end();) {
      const int g = (*it)->shard;
      if (g < request->shards_size() && request->shards(g).primary() == me) {
        ++it;
        continue;
      }
      spdlog::info("no longer serving shard {}", g);
      backups_.Release(g);
      dropped.push_back(*it);
      it = promoted_.erase(it);
    }
    // Primaries whose backup is gone stop forwarding.
    for (const std::shared_ptr<Primary>& p : promoted_) {
      if (p->shard < request->shards_size() && request->shards(p->shard).backup() < 0) {
        p->source->DropBackup();
      }
    }
    if (me < request->shards_size() && request->shards(me).backup() < 0) {
      own_->source->DropBackup();
    }
    roles_version_ = request->version();
    any_promoted_.store(!promoted_.empty(), std::memory_order_release);
    for (const auto& p : promoted_) response->add_primaries(p->shard);
    return absl::OkStatus();
  }();
  for (const std::shared_ptr<Primary>& p : dropped) {
    p->store->CancelAllWaiters(absl::UnavailableError(
        absl::StrCat("shard ", p->shard, " is no longer served by this ps")));
  }
  if (status.ok() && me < request->shards_size() && request->shards(me).primary() == me) {
    response->add_primaries(me);
  }
  done(status);
}

}  // namespace pst::ps
