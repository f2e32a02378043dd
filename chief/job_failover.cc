// Job's replicated-ps logic (job.h): failing a lost ps's shards over to
// their backups, giving shards their backups back (resyncs), the layout of
// the copies (learned from the ps by a restarted chief), and the end-of-job
// check that every backup equals its primary.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/job.h"
#include "common/logging.h"
#include "common/placement.h"

namespace pst::chief {

void Job::CheckReplicas() {
  if (!replicas_.enabled()) return;
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (!HoldsACopy(static_cast<int>(i))) continue;
    absl::StatusOr<proto::HealthResponse> health =
        ProbePs(*control_, static_cast<int>(i), absl::Seconds(30), /*digest=*/true);
    if (health.ok()) replicas_.Update(static_cast<int>(i), *health);
  }
  for (const ReplicaView::Shard& s : replicas_.shards()) {
    if (s.backup < 0) {
      spdlog::warn("shard {}: served by ps {} with no backup (its copy was lost)", s.shard,
                   s.primary);
    } else if (s.checked && s.digests_match) {
      spdlog::info("shard {}: its backup on ps {} equals its primary on ps {} ({} changes)",
                   s.shard, s.backup, s.primary, s.seq);
    } else {
      spdlog::warn("shard {}: its backup on ps {} is {} ({} of the primary's {} changes applied)",
                   s.shard, s.backup,
                   !s.in_sync() ? "out of sync"
                                : "not equal to its primary on ps " + std::to_string(s.primary),
                   s.backup_seq, s.seq);
    }
  }
}

bool Job::HoldsACopy(int ps) const { return common::HoldsACopy(layout_, ps); }

proto::ClusterState Job::CurrentState() const {
  proto::ClusterState state = coordinator_->State();
  *state.mutable_plan()->mutable_shards() = layout_.shards();
  return state;
}

absl::StatusOr<bool> Job::FailOver(int lost, const std::string& cause, int64_t step_before) {
  if (!replicas_.enabled() || lost < 0) return false;
  FailoverRecord record;
  record.cause = cause;
  record.lost_ps = lost;
  record.detected = clock_->Now();
  record.step_before = step_before;
  // Every shard of the lost ps needs a backup in sync on a ps that answers.
  proto::PlacementPlan layout = layout_;
  const std::vector<ReplicaView::Shard> view = replicas_.shards();
  for (int g = 0; g < layout.shards_size(); ++g) {
    proto::ShardCopies& copies = *layout.mutable_shards(g);
    if (copies.backup() == lost) copies.set_backup(-1);
    if (copies.primary() != lost) continue;
    const int backup = copies.backup();
    if (backup < 0 || !view[g].in_sync() || !ProbePs(*control_, backup, absl::Seconds(2)).ok()) {
      spdlog::warn("{}: shard {} has no backup in sync to take over{}", cause, g,
                   backup < 0 ? "" : absl::StrCat(" (its backup on ps ", backup, ")"));
      return false;
    }
    copies.set_primary(backup);
    copies.set_backup(-1);
    record.shards.push_back(g);
    record.promoted_to.push_back(backup);
  }
  // The new layout, to every ps that holds a copy in it (the promoted ones
  // first: without them nothing changes).
  proto::RolesRequest roles;
  roles.set_version(++roles_version_);
  *roles.mutable_shards() = layout.shards();
  std::vector<int> order(record.promoted_to);
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (static_cast<int>(i) != lost) order.push_back(static_cast<int>(i));
  }
  std::vector<bool> told(ps_.size(), false);
  for (int ps : order) {
    if (told[ps]) continue;
    if (!common::HoldsACopy(layout, ps)) continue;
    absl::StatusOr<proto::RolesResponse> answer = control_->SetRoles(ps, roles, absl::Seconds(10));
    told[ps] = true;
    const bool promoted_here = std::find(record.promoted_to.begin(), record.promoted_to.end(),
                                         ps) != record.promoted_to.end();
    if (!answer.ok()) {
      spdlog::warn("ps {} did not take the new roles: {}", ps, answer.status().message());
      if (promoted_here) return false;  // nothing was promoted: recover from a checkpoint
    }
  }
  layout_ = layout;
  coordinator_->SetShards(layout_.shards());
  replicas_.SetLayout(layout_.shards());
  record.promoted = clock_->Now();
  record.first_change.assign(record.shards.size(), absl::InfinitePast());
  record.step_after = coordinator_->Check(record.promoted).global_step;
  if (record.shards.empty()) {
    spdlog::warn("{}: it holds no shard's primary; going on without it", cause);
  } else {
    spdlog::warn(
        "{}: its shard(s) [{}] failed over to their backups on ps [{}] in {:.3f} s; no restore, "
        "training goes on from global step {}",
        cause, absl::StrJoin(record.shards, ", "), absl::StrJoin(record.promoted_to, ", "),
        absl::ToDoubleSeconds(record.promoted - record.detected), record.step_after);
    failovers_.push_back(record);
    if (metrics_ != nullptr) metrics_->FailedOver();
  }
  if (absl::StatusOr<proto::HealthResponse> health = ProbePs(*control_, lost, absl::Seconds(1));
      health.ok()) {
    ps_[lost].incarnation = health->incarnation();  // back already: it holds nothing now
  }
  membership_stale_ = true;
  return true;
}

void Job::NoteFirstChanges(int ps, const proto::HealthResponse& health) {
  for (FailoverRecord& record : failovers_) {
    for (size_t k = 0; k < record.shards.size(); ++k) {
      if (record.promoted_to[k] != ps || record.first_change[k] != absl::InfinitePast()) continue;
      for (const proto::ReplicaState& r : health.replicas()) {
        if (r.primary() && r.shard() == record.shards[k] && r.first_change_unix_ms() > 0) {
          record.first_change[k] = absl::FromUnixMillis(r.first_change_unix_ms());
        }
      }
    }
  }
}

void Job::LearnLayout() {
  if (!replicas_.enabled()) return;
  proto::PlacementPlan layout = layout_;
  // Each shard's primary as the ps tell it; when two ps claim one shard (an
  // old primary the chief had fenced off, and its promoted backup), the one
  // that took the newer roles knows better.
  std::vector<int64_t> claimed_at(layout.shards_size(), -1);
  std::vector<absl::StatusOr<proto::HealthResponse>> answers(ps_.size(),
                                                             absl::UnknownError("not probed"));
  ForEachPs(ps_.size(), [&](size_t i) {
    answers[i] = ProbePs(*control_, static_cast<int>(i), absl::Seconds(1));
    return absl::OkStatus();
  }).IgnoreError();
  for (size_t i = 0; i < ps_.size(); ++i) {
    const absl::StatusOr<proto::HealthResponse>& health = answers[i];
    if (!health.ok()) continue;  // not up yet: a fresh job, most likely
    roles_version_ = std::max(roles_version_, health->roles_version());
    for (const proto::ReplicaState& r : health->replicas()) {
      if (!r.primary() || r.shard() < 0 || r.shard() >= layout.shards_size()) continue;
      if (health->roles_version() < claimed_at[r.shard()]) continue;
      claimed_at[r.shard()] = health->roles_version();
      proto::ShardCopies& copies = *layout.mutable_shards(r.shard());
      copies.set_primary(static_cast<int>(i));
      copies.set_backup(r.backup_in_sync() || r.resyncing() ? r.backup_ps() : -1);
    }
  }
  bool moved = false;
  for (int g = 0; g < layout.shards_size(); ++g) {
    moved |= layout.shards(g).primary() != layout_.shards(g).primary() ||
             layout.shards(g).backup() != layout_.shards(g).backup();
  }
  if (!moved) return;
  std::vector<std::string> where;
  for (int g = 0; g < layout.shards_size(); ++g) {
    where.push_back(absl::StrCat(g, ": ps ", layout.shards(g).primary(), " (backup ",
                                 layout.shards(g).backup(), ")"));
  }
  spdlog::warn("the ps hold the shards where failovers left them, not as planned: {}",
               absl::StrJoin(where, ", "));
  layout_ = layout;
  coordinator_->SetShards(layout_.shards());
  replicas_.SetLayout(layout_.shards());
  // The same layout on every ps that holds a copy, at a version above any
  // they took.
  proto::RolesRequest roles;
  roles.set_version(++roles_version_);
  *roles.mutable_shards() = layout_.shards();
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (!HoldsACopy(static_cast<int>(i))) continue;
    absl::StatusOr<proto::RolesResponse> answer =
        control_->SetRoles(static_cast<int>(i), roles, absl::Seconds(10));
    if (!answer.ok()) {
      spdlog::warn("ps {} did not take the roles found: {}", i, answer.status().message());
    }
  }
}

void Job::MendBackups(absl::Time now) {
  if (!replicas_.enabled()) return;
  const std::vector<ReplicaView::Shard> view = replicas_.shards();
  for (ResyncRecord& r : resyncs_) {
    const ReplicaView::Shard& s = view[r.shard];
    if (r.in_sync != absl::InfinitePast() || !s.in_sync() || s.backup != r.backup) continue;
    r.in_sync = now;
    spdlog::info("shard {}: its backup on ps {} is in sync again, {:.2f} s after it was asked for",
                 r.shard, r.backup, absl::ToDoubleSeconds(r.in_sync - r.requested));
  }
  // Whether a ps answers now (asked once per call); a ps that holds no copy
  // is known from now on by the incarnation it answers with.
  std::vector<std::optional<bool>> answers(ps_.size());
  auto alive = [&](int ps) {
    if (!answers[ps].has_value()) {
      absl::StatusOr<proto::HealthResponse> health = ProbePs(*control_, ps, absl::Seconds(1));
      answers[ps] = health.ok();
      if (health.ok() && !HoldsACopy(ps)) {
        ps_[ps].incarnation = health->incarnation();
        ps_[ps].last_ok = now;
      }
    }
    return *answers[ps];
  };
  const absl::Duration settle = 2 * timing_.heartbeat_interval + absl::Seconds(1);
  proto::PlacementPlan layout = layout_;
  std::vector<int> mended;
  std::vector<int> new_backups;
  for (int g = 0; g < layout.shards_size(); ++g) {
    proto::ShardCopies& copies = *layout.mutable_shards(g);
    if (now - mended_at_[g] < settle) continue;
    if (copies.backup() >= 0) {
      // Assigned: resent whole when its primary no longer forwards to it
      // (a forward failed) while it answers.
      const ReplicaView::Shard& s = view[g];
      if (!s.primary_seen || s.forwarding || s.resyncing || !alive(copies.backup())) continue;
      mended.push_back(g);
      continue;
    }
    const proto::ShardCopies& planned = initial_.plan().shards(g);
    std::vector<int> candidates = {planned.backup(), planned.primary()};
    for (int ps = 0; ps < static_cast<int>(ps_.size()); ++ps) candidates.push_back(ps);
    for (int ps : candidates) {
      if (ps < 0 || ps == copies.primary() || !alive(ps)) continue;
      copies.set_backup(ps);
      mended.push_back(g);
      new_backups.push_back(ps);
      break;
    }
    if (copies.backup() < 0) mended_at_[g] = now;  // none answers: asked again after `settle`
  }
  if (mended.empty()) return;
  proto::RolesRequest roles;
  roles.set_version(++roles_version_);
  roles.set_resync(true);
  *roles.mutable_shards() = layout.shards();
  // The new backups first (a ps that came back learns its own store no
  // longer serves), then the primaries, which send the shards.
  std::vector<int> order(new_backups);
  for (int ps = 0; ps < static_cast<int>(ps_.size()); ++ps) order.push_back(ps);
  std::vector<bool> told(ps_.size(), false);
  for (int ps : order) {
    if (told[ps] || !common::HoldsACopy(layout, ps)) continue;
    told[ps] = true;
    absl::StatusOr<proto::RolesResponse> answer = control_->SetRoles(ps, roles, absl::Seconds(60));
    if (!answer.ok()) {
      spdlog::warn("ps {} did not take the roles that give shards their backups back: {}", ps,
                   answer.status().message());
      // A new backup that did not take them is given none this time.
      if (std::find(new_backups.begin(), new_backups.end(), ps) != new_backups.end()) return;
    }
  }
  layout_ = layout;
  coordinator_->SetShards(layout_.shards());
  replicas_.SetLayout(layout_.shards());
  for (int g : mended) {
    mended_at_[g] = now;
    ResyncRecord record;
    record.shard = g;
    record.primary = layout_.shards(g).primary();
    record.backup = layout_.shards(g).backup();
    record.requested = now;
    resyncs_.push_back(record);
    spdlog::info(
        "shard {}: its primary on ps {} sends it whole to its backup on ps {} while "
        "training goes on",
        g, record.primary, record.backup);
  }
}

}  // namespace pst::chief
