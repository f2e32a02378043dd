#include "ps_server/replica_source.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pst::ps {

void ReplicaSource::SetBackup(int backup_ps, std::unique_ptr<ReplicaLink> link, bool restart) {
  std::multimap<int64_t, Done> answered;  // callers of the old stream
  {
    absl::MutexLock order(&order_mu_);
    absl::MutexLock lock(&mu_);
    if ((in_sync_ && !restart) || link == nullptr) return;
    answered.swap(waiting_);
    backup_ps_ = backup_ps;
    link_ = std::move(link);
    in_sync_ = true;
    fenced_ = false;
    ++stream_;
    acked_stream_ = stream_;
    next_seq_ = 1;
    sequenced_ = acked_ = 0;
    acked_ahead_.clear();
    spdlog::info("shard {}: changes are forwarded to its backup on ps {}{}", shard_, backup_ps,
                 stream_ > 1 ? absl::StrCat(" (stream ", stream_, ")") : std::string());
  }
  for (auto& [unused, done] : answered) done(absl::OkStatus());
}

bool ReplicaSource::in_sync() const {
  absl::MutexLock lock(&mu_);
  return in_sync_;
}

bool ReplicaSource::has_backup() const {
  absl::MutexLock lock(&mu_);
  return backup_ps_ >= 0;
}

void ReplicaSource::Change(absl::FunctionRef<absl::Status(proto::ReplicateRequest* change)> apply,
                           Done done) {
  std::shared_ptr<ReplicaLink> link;
  bool fenced;
  {
    absl::MutexLock lock(&mu_);
    fenced = fenced_;
    if (in_sync_) link = link_;
  }
  if (fenced) {
    done(FencedError());
    return;
  }
  if (link == nullptr) {  // no backup to keep in step: nothing to order
    proto::ReplicateRequest unused;
    done(apply(&unused));
    return;
  }
  auto request = std::make_shared<proto::ReplicateRequest>();
  Done now;  // runs below, outside the locks
  absl::Status status;
  {
    absl::MutexLock order(&order_mu_);
    status = apply(request.get());
    if (!status.ok()) {
      now = std::move(done);
    } else {
      const bool changed = request->change_case() != proto::ReplicateRequest::CHANGE_NOT_SET;
      // A change waits for itself; a call that changed nothing (a repeat)
      // for every change before it, one of which may be its original.
      const int64_t seq = changed ? next_seq_++ : next_seq_ - 1;
      {
        absl::MutexLock lock(&mu_);
        if (changed) sequenced_ = seq;
        if (in_sync_ && seq > acked_) {
          waiting_.emplace(seq, std::move(done));
        } else {
          now = std::move(done);
        }
      }
      if (changed) {
        request->set_shard(shard_);
        request->set_source_incarnation(incarnation_);
        request->set_stream(stream_);
        request->set_seq(seq);
        link->Send(std::move(request),
                   [this, seq, stream = stream_](absl::Status s) { Acked(stream, seq, s); });
      }
    }
  }
  if (now) now(status);
}

absl::Status ReplicaSource::FencedError() const {
  return absl::UnavailableError(absl::StrCat(
      "shard ", shard_, " moved: its backup was promoted to primary; send to the new one"));
}

void ReplicaSource::Acked(int64_t stream, int64_t seq, const absl::Status& status) {
  std::multimap<int64_t, Done> ready;
  bool fenced = false;
  {
    absl::MutexLock lock(&mu_);
    // A late answer from a stream given up on: its callers were answered.
    if (stream != acked_stream_) return;
    if (status.code() == absl::StatusCode::kAborted) {
      if (!fenced_) {
        spdlog::error(
            "shard {}: its backup on ps {} was promoted in this primary's place ({}): "
            "refusing changes from now on",
            shard_, backup_ps_, status.message());
      }
      fenced_ = true;
      in_sync_ = false;
      waiting_.swap(ready);
      fenced = true;
    } else if (!status.ok()) {
      if (in_sync_) {
        spdlog::error(
            "shard {}: its backup on ps {} did not take change {} ({}): the backup is out of sync; "
            "going on without it",
            shard_, backup_ps_, seq, status.ToString());
      }
      in_sync_ = false;
    } else if (seq > acked_) {
      acked_ahead_.insert(seq);
      while (!acked_ahead_.empty() && *acked_ahead_.begin() == acked_ + 1) {
        acked_ = *acked_ahead_.begin();
        acked_ahead_.erase(acked_ahead_.begin());
      }
    }
    if (!fenced) Release(&ready);
  }
  for (auto& [unused, done] : ready) done(fenced ? FencedError() : absl::OkStatus());
}

void ReplicaSource::Release(std::multimap<int64_t, Done>* ready) {
  auto end = in_sync_ ? waiting_.upper_bound(acked_) : waiting_.end();
  for (auto it = waiting_.begin(); it != end;) {
    auto node = waiting_.extract(it++);
    ready->insert(std::move(node));
  }
}

void ReplicaSource::DropBackup() {
  std::multimap<int64_t, Done> ready;
  {
    absl::MutexLock lock(&mu_);
    if (backup_ps_ < 0 && link_ == nullptr) return;
    if (in_sync_) spdlog::warn("shard {}: no longer forwarded to ps {}", shard_, backup_ps_);
    in_sync_ = false;
    link_ = nullptr;
    Release(&ready);
  }
  for (auto& [unused, done] : ready) done(absl::OkStatus());
}

void ReplicaSource::MarkPromoted() {
  int64_t not_promoted = -1;
  first_change_ms_.compare_exchange_strong(not_promoted, 0);
}

void ReplicaSource::NotePushServed() {
  if (first_change_ms_.load(std::memory_order_relaxed) != 0) return;  // not promoted, or noted
  int64_t none = 0;
  first_change_ms_.compare_exchange_strong(none, absl::ToUnixMillis(absl::Now()));
}

void ReplicaSource::Quiesced(absl::FunctionRef<void(int64_t seq)> fn) const {
  absl::MutexLock order(&order_mu_);
  fn(next_seq_ - 1);
}

void ReplicaSource::State(proto::ReplicaState* state) const {
  absl::MutexLock lock(&mu_);
  state->set_shard(shard_);
  state->set_primary(true);
  state->set_backup_ps(backup_ps_);
  state->set_backup_in_sync(in_sync_);
  state->set_seq(sequenced_);
  state->set_acked(acked_);
  state->set_first_change_unix_ms(std::max<int64_t>(0, first_change_ms_.load()));
}

}  // namespace pst::ps
