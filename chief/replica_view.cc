#include "chief/replica_view.h"

#include "absl/strings/str_cat.h"

namespace pst::chief {

ReplicaView::ReplicaView(const proto::PlacementPlan& plan) : enabled_(plan.replicas() == 2) {
  if (!enabled_) return;
  for (int g = 0; g < plan.shards_size(); ++g) {
    Shard s;
    s.shard = g;
    s.primary = plan.shards(g).primary();
    s.backup = plan.shards(g).backup();
    shards_.push_back(s);
  }
  digest_of_primary_.assign(shards_.size(), 0);
  digest_of_backup_.assign(shards_.size(), 0);
}

void ReplicaView::SetLayout(const google::protobuf::RepeatedPtrField<proto::ShardCopies>& shards) {
  absl::MutexLock lock(&mu_);
  for (int g = 0; g < shards.size() && g < static_cast<int>(shards_.size()); ++g) {
    Shard& s = shards_[g];
    if (s.primary != shards[g].primary()) {
      s.primary_seen = s.forwarding = s.checked = false;
      s.seq = s.acked = 0;
      digest_of_primary_[g] = 0;
    }
    if (s.backup != shards[g].backup()) {
      s.backup_seen = s.copy_ok = s.checked = s.forwarding = s.resyncing = false;
      s.backup_seq = 0;
      digest_of_backup_[g] = 0;
    }
    s.primary = shards[g].primary();
    s.backup = shards[g].backup();
  }
}

void ReplicaView::Update(int ps, const proto::HealthResponse& health) {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  // What ps `ps` holds now; a restarted ps holds nothing it held before.
  for (Shard& s : shards_) {
    if (s.primary == ps) s.primary_seen = s.resyncing = false;
    if (s.backup == ps) s.backup_seen = false;
  }
  // Digests of one answer pair up with the other copy's in the same pass.
  for (const proto::ReplicaState& r : health.replicas()) {
    if (r.shard() < 0 || r.shard() >= static_cast<int>(shards_.size())) continue;
    Shard& s = shards_[r.shard()];
    if (r.primary() && s.primary == ps) {
      s.primary_seen = true;
      s.forwarding = r.backup_in_sync() && r.backup_ps() == s.backup;
      s.resyncing = r.resyncing() && r.backup_ps() == s.backup;
      s.seq = r.seq();
      s.acked = r.acked();
      if (r.digest() != 0) {
        s.checked = s.backup_seen && s.backup_seq == s.seq;
        s.digests_match = s.checked && digest_of_backup_[r.shard()] == r.digest();
        digest_of_primary_[r.shard()] = r.digest();
      }
    } else if (!r.primary() && s.backup == ps) {
      s.backup_seen = true;
      s.copy_ok = r.backup_in_sync();
      s.backup_seq = r.seq();
      if (r.digest() != 0) {
        digest_of_backup_[r.shard()] = r.digest();
        s.checked = s.primary_seen && s.backup_seq == s.seq;
        s.digests_match = s.checked && digest_of_primary_[r.shard()] == r.digest();
      }
    }
  }
}

std::vector<ReplicaView::Shard> ReplicaView::shards() const {
  absl::MutexLock lock(&mu_);
  return shards_;
}

int ReplicaView::in_sync() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const Shard& s : shards_) n += s.in_sync();
  return n;
}

std::string ReplicaView::ProgressText() const {
  if (!enabled_) return "";
  absl::MutexLock lock(&mu_);
  int n = 0, resyncing = 0;
  for (const Shard& s : shards_) {
    n += s.in_sync();
    resyncing += s.resyncing && !s.in_sync();
  }
  return absl::StrCat("backups ", n, "/", shards_.size(), " in sync",
                      resyncing > 0 ? absl::StrCat(", ", resyncing, " resyncing") : "");
}

nlohmann::json ReplicaView::ToJson() const {
  nlohmann::json out;
  out["replicas"] = enabled_ ? 2 : 1;
  nlohmann::json shards = nlohmann::json::array();
  absl::MutexLock lock(&mu_);
  for (const Shard& s : shards_) {
    nlohmann::json j = {{"shard", s.shard},
                        {"primary", s.primary},
                        {"backup", s.backup},
                        {"in_sync", s.in_sync()},
                        {"resyncing", s.resyncing && !s.in_sync()},
                        {"changes", s.seq},
                        {"backup_changes", s.backup_seq}};
    if (s.checked) j["digests_match"] = s.digests_match;
    shards.push_back(std::move(j));
  }
  out["shards"] = std::move(shards);
  return out;
}

}  // namespace pst::chief
