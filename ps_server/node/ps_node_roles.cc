// PsNode's shards (ps_node.h): which primary serves a request, and the
// roles the chief sets in a replicated job (promoting backup copies after
// a failover).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "ps_server/node/ps_node.h"

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
  absl::MutexLock lock(&primaries_mu_);
  for (const std::shared_ptr<Primary>& p : promoted_) {
    if (p->shard == shard) return p;
  }
  if (shard == options_.ps_index && own_serving_) return own_;
  return nullptr;
}

std::vector<std::shared_ptr<PsNode::Primary>> PsNode::Primaries() const {
  std::vector<std::shared_ptr<Primary>> all;
  absl::MutexLock lock(&primaries_mu_);
  if (own_serving_) all.push_back(own_);
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
  std::vector<std::pair<std::shared_ptr<Primary>, int>> resyncs;  // and the backup to send to
  absl::Status status = [&]() -> absl::Status {
    absl::MutexLock lock(&primaries_mu_);
    if (request->version() < roles_version_) {
      return absl::FailedPreconditionError(absl::StrCat("roles of version ", request->version(),
                                                        " are older than those taken (",
                                                        roles_version_, ")"));
    }
    auto serves = [&](int g) {
      if (g == me && own_serving_) return true;
      for (const auto& p : promoted_) {
        if (p->shard == g) return true;
      }
      return false;
    };
    auto primary_of = [&](int g) {
      return g < request->shards_size() ? request->shards(g).primary() : g;
    };
    // Shards to serve here that are not served yet, from the copies held
    // (this ps's own shard too, when its own store lost it: a restart).
    // Every copy is checked before any is promoted.
    std::vector<int> promote;
    for (int g = 0; g < request->shards_size(); ++g) {
      if (primary_of(g) == me && !serves(g) && (g != me || backups_.CanTake(g).ok())) {
        promote.push_back(g);
      }
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
    // Promoted shards that are not this ps's any more.
    for (auto it = promoted_.begin(); it != promoted_.end();) {
      const int g = (*it)->shard;
      if (primary_of(g) == me) {
        ++it;
        continue;
      }
      spdlog::info("no longer serving shard {}", g);
      backups_.Release(g);
      dropped.push_back(*it);
      it = promoted_.erase(it);
    }
    // This ps's own store serves its shard unless the shard is elsewhere,
    // or a promoted copy here serves it instead.
    const bool own_serving =
        primary_of(me) == me && std::none_of(promoted_.begin(), promoted_.end(),
                                             [&](const auto& p) { return p->shard == me; });
    if (own_serving_ && !own_serving) {
      spdlog::info("this ps's own store no longer serves shard {}", me);
      own_->source->Moved();
    }
    own_serving_ = own_serving;
    // Each primary here forwards to the backup named, if any.
    std::vector<std::shared_ptr<Primary>> serving(promoted_);
    if (own_serving_) serving.push_back(own_);
    for (const std::shared_ptr<Primary>& p : serving) {
      const int backup =
          p->shard < request->shards_size() ? request->shards(p->shard).backup() : -1;
      if (backup < 0) {
        p->source->DropBackup();
      } else if (request->resync() && !p->source->forwarding_to(backup)) {
        resyncs.emplace_back(p, backup);
      }
    }
    roles_version_ = request->version();
    any_promoted_.store(!promoted_.empty(), std::memory_order_release);
    for (const auto& p : promoted_) response->add_primaries(p->shard);
    if (own_serving_) response->add_primaries(me);
    return absl::OkStatus();
  }();
  for (const std::shared_ptr<Primary>& p : dropped) {
    p->source->Moved();
    p->store->CancelAllWaiters(absl::UnavailableError(
        absl::StrCat("shard ", p->shard, " is no longer served by this ps")));
  }
  // Each backup that does not take the changes yet is sent the shard whole
  // (the order lock held while its state is taken, not while it is sent).
  for (const auto& resync : resyncs) {
    const std::shared_ptr<Primary>& p = resync.first;
    const int backup = resync.second;
    std::unique_ptr<ReplicaLink> link = options_.link_to ? options_.link_to(backup) : nullptr;
    if (link == nullptr) {
      spdlog::error("shard {}: cannot reach ps {} to send it the shard", p->shard, backup);
      continue;
    }
    p->source->Resync(backup, std::move(link),
                      [&] { return p->store->ExportState(options_.resync_part_bytes); });
  }
  done(status);
}

}  // namespace pst::ps
