#include "ps_server/replication/replica_source.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pst::ps {

void ReplicaSource::NewStream(int backup_ps, std::unique_ptr<ReplicaLink> link,
                              std::multimap<int64_t, Done>* answered) {
  answered->swap(waiting_);
  backup_ps_ = backup_ps;
  link_ = std::move(link);
  forwarding_ = true;
  fenced_ = false;
  ++stream_;
  acked_stream_ = stream_;
  next_seq_ = 1;
  sequenced_ = acked_ = 0;
  state_end_ = whole_at_ = 0;
  acked_ahead_.clear();
  start_taken_ = false;
  queued_.clear();
  state_.reset();
  state_next_seq_ = 1;
  state_in_flight_ = 0;
  state_bytes_ = 0;
}

void ReplicaSource::Address(proto::ReplicateRequest* request, int64_t stream,
                            int64_t seq) const {
  request->set_shard(shard_);
  request->set_source_incarnation(incarnation_);
  request->set_stream(stream);
  request->set_seq(seq);
}

void ReplicaSource::Send(ReplicaLink& link, int64_t stream,
                         std::shared_ptr<proto::ReplicateRequest> request) {
  const int64_t seq = request->seq();
  link.Send(std::move(request), [this, seq, stream](absl::Status s) { Acked(stream, seq, s); });
}

void ReplicaSource::SetBackup(int backup_ps, std::unique_ptr<ReplicaLink> link, bool restart) {
  std::multimap<int64_t, Done> answered;  // callers of the old stream
  {
    absl::MutexLock order(&order_mu_);
    absl::MutexLock lock(&mu_);
    if ((forwarding_ && was_whole_ && !restart) || link == nullptr) return;
    NewStream(backup_ps, std::move(link), &answered);
    was_whole_ = true;  // its first change, a create, makes the copy
    spdlog::info("shard {}: changes are forwarded to its backup on ps {}{}", shard_, backup_ps,
                 stream_ > 1 ? absl::StrCat(" (stream ", stream_, ")") : std::string());
  }
  for (auto& [unused, done] : answered) done(absl::OkStatus());
}

void ReplicaSource::Resync(int backup_ps, std::unique_ptr<ReplicaLink> link,
                           ExportFn export_state) {
  if (link == nullptr) return;
  std::multimap<int64_t, Done> answered;
  {
    absl::MutexLock order(&order_mu_);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<StateExport>> exported = export_state();
    absl::StatusOr<proto::StoreChunk> first =
        exported.ok() ? (*exported)->Next() : absl::StatusOr<proto::StoreChunk>(exported.status());
    if (!first.ok()) {
      // The backup stays out of sync (the chief sees it so and tries again).
      spdlog::error("shard {}: cannot take its state to send to its backup on ps {}: {}", shard_,
                    backup_ps, first.status().message());
      return;
    }
    std::shared_ptr<StateExport> state = *std::move(exported);
    auto request = std::make_shared<proto::ReplicateRequest>();
    std::shared_ptr<ReplicaLink> sender;
    int64_t stream;
    const int64_t parts = state->parts();
    {
      absl::MutexLock lock(&mu_);
      NewStream(backup_ps, std::move(link), &answered);
      was_whole_ = false;
      stream = stream_;
      Address(request.get(), stream_, next_seq_);
      *request->mutable_state() = *std::move(first);
      // Every part's seq is taken now; the changes after them follow.
      next_seq_ += parts;
      sequenced_ = state_end_ = whole_at_ = next_seq_ - 1;
      state_next_seq_ = 2;  // part 0 starts the copy; the rest once it is taken
      state_in_flight_ = 1;
      state_bytes_ = static_cast<int64_t>(request->ByteSizeLong());
      if (parts > 1) state_ = std::move(state);
      sender = link_;
    }
    spdlog::info(
        "shard {}: sending it whole to its backup on ps {} (stream {}: {} part(s), taken in "
        "{:.3f} s, made as they go); training goes on",
        shard_, backup_ps, stream, parts, absl::ToDoubleSeconds(absl::Now() - start));
    // Sent under the order lock (not mu_: an answer may come at once).
    Send(*sender, stream, std::move(request));
  }
  for (auto& [unused, done] : answered) done(absl::OkStatus());
  SendStateParts();
}

void ReplicaSource::SendStateParts() {
  {
    absl::MutexLock lock(&mu_);
    // Another thread sends (or this one, an answer having come back inside
    // its Send): it goes on while there is room, seen under mu_.
    if (state_sending_) return;
    state_sending_ = true;
  }
  for (;;) {
    std::shared_ptr<StateExport> state;
    std::shared_ptr<ReplicaLink> link;
    int64_t stream, seq;
    {
      absl::MutexLock lock(&mu_);
      if (state_ == nullptr || !forwarding_ || !start_taken_ ||
          state_in_flight_ >= kStateWindow) {
        state_sending_ = false;
        return;
      }
      state = state_;
      link = link_;
      stream = acked_stream_;
      seq = state_next_seq_;
    }
    absl::StatusOr<proto::StoreChunk> part = state->Next();  // reads rows on disk
    auto request = std::make_shared<proto::ReplicateRequest>();
    {
      absl::MutexLock lock(&mu_);
      if (stream != acked_stream_ || state_ != state) continue;  // a new stream: its parts
      if (!part.ok()) {
        spdlog::error(
            "shard {}: cannot make part {} of its state for its backup on ps {} ({}): the "
            "backup is out of sync; going on without it",
            shard_, seq - 1, backup_ps_, part.status().ToString());
        forwarding_ = false;
        state_.reset();
        queued_.clear();
        state_sending_ = false;
        return;
      }
      Address(request.get(), stream, seq);
      *request->mutable_state() = *std::move(part);
      ++state_next_seq_;
      ++state_in_flight_;
      state_bytes_ += static_cast<int64_t>(request->ByteSizeLong());
      if (state_next_seq_ > state_end_) {
        state_.reset();  // every part made: the export (and its cuts) goes
        spdlog::info("shard {}: the {} parts of its state are made for its backup on ps {} "
                     "({} bytes)",
                     shard_, state_end_, backup_ps_, state_bytes_);
      }
    }
    Send(*link, stream, std::move(request));
  }
}

bool ReplicaSource::in_sync() const {
  absl::MutexLock lock(&mu_);
  return forwarding_ && was_whole_;
}

bool ReplicaSource::forwarding() const {
  absl::MutexLock lock(&mu_);
  return forwarding_;
}

bool ReplicaSource::forwarding_to(int backup_ps) const {
  absl::MutexLock lock(&mu_);
  return forwarding_ && backup_ps_ == backup_ps;
}

bool ReplicaSource::has_backup() const {
  absl::MutexLock lock(&mu_);
  return backup_ps_ >= 0;
}

void ReplicaSource::Change(absl::FunctionRef<absl::Status(proto::ReplicateRequest* change)> apply,
                           Done done) {
  std::optional<absl::Status> answered;
  {
    // Shared: changes with no backup to keep in step need no order among
    // themselves, but a stream that starts (exclusive) must not miss one.
    absl::ReaderMutexLock shared(&order_mu_);
    bool fenced, has_link;
    {
      absl::MutexLock lock(&mu_);
      fenced = fenced_;
      has_link = link_ != nullptr;
    }
    if (fenced) {
      answered = FencedError();
    } else if (!has_link) {
      proto::ReplicateRequest unused;
      answered = apply(&unused);
    }
  }
  if (answered.has_value()) {
    done(std::move(*answered));
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
      std::shared_ptr<ReplicaLink> link;
      int64_t seq = 0;
      {
        absl::MutexLock lock(&mu_);
        if (fenced_) {
          status = FencedError();
          now = std::move(done);
        } else if (!forwarding_) {
          // Out of sync: held while the chief may promote the backup.
          if (was_whole_ && link_ != nullptr) {
            waiting_.emplace(next_seq_, std::move(done));
          } else {
            now = std::move(done);
          }
        } else {
          seq = changed ? next_seq_++ : next_seq_ - 1;
          if (changed) sequenced_ = seq;
          if (acked_ < state_end_) {
            // The backup is still taking the state: it cannot be promoted
            // yet, and is whole once it holds this change too.
            whole_at_ = std::max(whole_at_, seq);
            now = std::move(done);
          } else if (seq > acked_) {
            waiting_.emplace(seq, std::move(done));
          } else {
            now = std::move(done);
          }
          if (changed) {
            Address(request.get(), stream_, seq);
            if (ChangesFlowLocked() || seq == 1) {
              link = link_;
            } else {
              queued_.push_back(std::move(request));  // sent once the state is taken
            }
          }
        }
      }
      if (link != nullptr) Send(*link, stream_, std::move(request));
    }
  }
  if (now) now(status);
}

absl::Status ReplicaSource::FencedError() const {
  return absl::UnavailableError(
      absl::StrCat("shard ", shard_,
                   " is served by another ps now (its backup was promoted): send to its "
                   "primary"));
}

void ReplicaSource::Acked(int64_t stream, int64_t seq, const absl::Status& status) {
  std::multimap<int64_t, Done> ready;
  bool fenced = false;
  std::vector<std::shared_ptr<proto::ReplicateRequest>> now_sent;
  std::shared_ptr<ReplicaLink> link;
  {
    absl::MutexLock lock(&mu_);
    // A late answer from a stream given up on: its callers were answered.
    if (stream != acked_stream_) return;
    if (!status.ok()) {
      queued_.clear();
      state_.reset();
    } else {
      if (seq == 1) start_taken_ = true;
      if (seq <= state_end_) --state_in_flight_;  // a part of a resync's state
    }
    if (status.code() == absl::StatusCode::kAborted) {
      if (!fenced_) {
        spdlog::error(
            "shard {}: its backup on ps {} was promoted in this primary's place ({}): "
            "refusing changes from now on",
            shard_, backup_ps_, status.message());
      }
      fenced_ = true;
      forwarding_ = false;
      waiting_.swap(ready);
      fenced = true;
    } else if (!status.ok()) {
      if (forwarding_) {
        spdlog::error(
            "shard {}: its backup on ps {} did not take change {} ({}): the backup is out of "
            "sync; {}",
            shard_, backup_ps_, seq, status.ToString(),
            was_whole_ ? "changes wait for the chief to send the shard whole again or to drop "
                         "the backup"
                       : "going on without it");
      }
      forwarding_ = false;
    } else if (seq > acked_) {
      acked_ahead_.insert(seq);
      while (!acked_ahead_.empty() && *acked_ahead_.begin() == acked_ + 1) {
        acked_ = *acked_ahead_.begin();
        acked_ahead_.erase(acked_ahead_.begin());
      }
      if (forwarding_ && !was_whole_ && state_end_ > 0 && WholeLocked()) {
        was_whole_ = true;
        spdlog::info("shard {}: its backup on ps {} holds it whole again ({} changes)", shard_,
                     backup_ps_, acked_);
      }
      if (forwarding_ && ChangesFlowLocked() && !queued_.empty()) {
        now_sent.swap(queued_);
        link = link_;
      }
    }
    if (!fenced) Release(&ready);
  }
  for (auto& request : now_sent) Send(*link, stream, std::move(request));
  for (auto& [unused, done] : ready) done(fenced ? FencedError() : absl::OkStatus());
  if (status.ok()) SendStateParts();
}

void ReplicaSource::Release(std::multimap<int64_t, Done>* ready) {
  if (!forwarding_ && was_whole_ && link_ != nullptr) return;  // held for the chief
  auto end = forwarding_ ? waiting_.upper_bound(acked_) : waiting_.end();
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
    if (link_ != nullptr)
      spdlog::warn("shard {}: no longer forwarded to ps {}", shard_, backup_ps_);
    forwarding_ = false;
    was_whole_ = false;
    link_ = nullptr;
    queued_.clear();
    state_.reset();
    Release(&ready);
  }
  for (auto& [unused, done] : ready) done(absl::OkStatus());
}

void ReplicaSource::Moved() {
  std::multimap<int64_t, Done> refused;
  {
    absl::MutexLock lock(&mu_);
    fenced_ = true;
    forwarding_ = false;
    link_ = nullptr;
    queued_.clear();
    state_.reset();
    refused.swap(waiting_);
  }
  for (auto& [unused, done] : refused) done(FencedError());
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
  state->set_backup_in_sync(forwarding_ && was_whole_);
  state->set_resyncing(forwarding_ && !was_whole_);
  state->set_seq(sequenced_);
  state->set_acked(acked_);
  state->set_first_change_unix_ms(std::max<int64_t>(0, first_change_ms_.load()));
}

}  // namespace pst::ps
