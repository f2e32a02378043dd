#include "ps_server/replication/backup_copies.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace pst::ps {

absl::Status BackupCopies::ApplyOne(VariableStore& store, const proto::ReplicateRequest& request) {
  int64_t generation = store.generation();
  absl::Status status;
  switch (request.change_case()) {
    case proto::ReplicateRequest::kCreate:
      status = store.Create(request.create()).status();
      break;
    case proto::ReplicateRequest::kPush: {
      proto::PushResponse response;
      generation = request.push().generation();
      status = store.Push(request.push(), &response);
      break;
    }
    case proto::ReplicateRequest::kPushRows: {
      proto::PushRowsResponse response;
      generation = request.push_rows().generation();
      status = store.PushRows(request.push_rows(), &response);
      break;
    }
    case proto::ReplicateRequest::kMembership:
      status = store.SetMembership(request.membership());
      break;
    case proto::ReplicateRequest::kPullRows: {
      proto::PullRowsResponse response;
      status = store.PullRows(request.pull_rows(), &response);
      break;
    }
    case proto::ReplicateRequest::kState:
      return store.LoadState(request.state());
    default:
      return absl::InvalidArgumentError("a replicated change that holds no change");
  }
  // Its primary took it in a generation a restore of both copies has
  // replaced since: the restore overtook it here.
  if (status.code() == absl::StatusCode::kAborted && generation != store.generation()) {
    return absl::OkStatus();
  }
  return status;
}

void BackupCopies::ApplyInTurn(int shard, Copy& copy,
                               std::shared_ptr<const proto::ReplicateRequest> request, Done done,
                               std::vector<std::pair<Done, absl::Status>>* answers) {
  while (true) {
    absl::Status status = ApplyOne(*copy.store, *request);
    if (!status.ok()) {
      spdlog::error(
          "copy of shard {}: change {} was taken by its primary but not here ({}): this "
          "copy is broken",
          shard, request->seq(), status.ToString());
      copy.broken = true;
      answers->emplace_back(std::move(done),
                            absl::FailedPreconditionError(
                                absl::StrCat("the backup copy of shard ", shard, " refused change ",
                                             request->seq(), ": ", status.message())));
      for (auto& [seq, waiting] : copy.ahead) {
        answers->emplace_back(std::move(waiting.second),
                              absl::FailedPreconditionError(
                                  absl::StrCat("the backup copy of shard ", shard, " is broken")));
      }
      copy.ahead.clear();
      return;
    }
    copy.applied = request->seq();
    if (request->has_state() && request->state().part() + 1 == request->state().parts()) {
      copy.whole = true;
      spdlog::info("backup copy of shard {}: taken whole ({} part(s))", shard,
                   request->state().parts());
    }
    answers->emplace_back(std::move(done), absl::OkStatus());
    auto next = copy.ahead.begin();
    if (next == copy.ahead.end() || next->first != copy.applied + 1) return;
    request = std::move(next->second.first);
    done = std::move(next->second.second);
    copy.ahead.erase(next);
  }
}

void BackupCopies::Wait(Waiting* waiting, int64_t seq,
                        std::shared_ptr<const proto::ReplicateRequest> request, Done done) {
  auto [it, fresh] = waiting->try_emplace(seq, std::move(request), nullptr);
  if (fresh) {
    it->second.second = std::move(done);
    return;
  }
  // Sent twice while it waits: both callers get its answer.
  it->second.second = [first = std::move(it->second.second),
                       second = std::move(done)](absl::Status status) {
    first(status);
    second(std::move(status));
  };
}

void BackupCopies::Apply(std::shared_ptr<const proto::ReplicateRequest> request, Done done) {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Slot>& held = slots_[request->shard()];
    if (held == nullptr) held = std::make_shared<Slot>();
    slot = held;
  }
  const int shard = request->shard();
  std::vector<std::pair<Done, absl::Status>> answers;
  bool taken;
  {
    absl::MutexLock lock(&slot->mu);
    taken = slot->taken;
  }
  if (taken) {
    done(absl::AbortedError(
        absl::StrCat("shard ", shard, " is served by this ps now: its old primary is fenced off")));
    return;
  }
  {
    absl::MutexLock lock(&slot->mu);
    Copy* copy = slot->copy.get();
    if (copy == nullptr || copy->source != request->source_incarnation() ||
        copy->stream != request->stream()) {
      const bool starts_copy =
          request->seq() == 1 &&
          (request->has_create() || (request->has_state() && request->state().part() == 0));
      if (!starts_copy) {
        copy = nullptr;
        answers.emplace_back(
            std::move(done),
            absl::FailedPreconditionError(absl::StrFormat(
                "this ps holds no copy of shard %d from primary incarnation %016x, stream %d "
                "(one of them restarted): the copy must be sent whole",
                shard, request->source_incarnation(), request->stream())));
      } else {
        if (copy != nullptr) {
          for (auto& [seq, waiting] : copy->ahead) {
            answers.emplace_back(std::move(waiting.second),
                                 absl::FailedPreconditionError("its primary restarted"));
          }
        }
        slot->copy = std::make_unique<Copy>(options_);
        copy = slot->copy.get();
        copy->source = request->source_incarnation();
        copy->stream = request->stream();
        copy->whole = request->has_create();
        spdlog::info("holding the backup copy of shard {} (primary incarnation {:016x}, stream {})",
                     shard, copy->source, copy->stream);
      }
    }
    if (copy == nullptr) {
      // Answered above.
    } else if (copy->broken) {
      answers.emplace_back(std::move(done), absl::FailedPreconditionError(absl::StrCat(
                                                "the backup copy of shard ", shard,
                                                " here is broken: the copy must be sent whole")));
    } else if (request->seq() <= copy->applied) {
      answers.emplace_back(std::move(done), absl::OkStatus());  // a resend
    } else if (request->seq() > copy->applied + 1) {
      if (static_cast<int>(copy->ahead.size()) >= kMaxAhead) {
        answers.emplace_back(std::move(done),
                             absl::ResourceExhaustedError(absl::StrCat(
                                 "the backup copy of shard ", shard, " has ", kMaxAhead,
                                 " changes waiting for change ", copy->applied + 1)));
      } else {
        const int64_t seq = request->seq();
        Wait(&copy->ahead, seq, std::move(request), std::move(done));
      }
    } else {
      ApplyInTurn(shard, *copy, std::move(request), std::move(done), &answers);
    }
  }
  for (auto& [answer, status] : answers) answer(status);
}

absl::Status BackupCopies::CanTake(int shard) const {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock lock(&mu_);
    auto it = slots_.find(shard);
    if (it != slots_.end()) slot = it->second;
  }
  if (slot != nullptr) {
    absl::MutexLock lock(&slot->mu);
    if (slot->copy != nullptr && !slot->copy->broken && slot->copy->whole) {
      return absl::OkStatus();
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("this ps holds no whole copy of shard ", shard));
}

absl::StatusOr<std::shared_ptr<VariableStore>> BackupCopies::Take(int shard) {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock lock(&mu_);
    auto it = slots_.find(shard);
    if (it != slots_.end()) slot = it->second;
  }
  std::vector<std::pair<Done, absl::Status>> answers;
  std::shared_ptr<VariableStore> store;
  if (slot != nullptr) {
    absl::MutexLock lock(&slot->mu);
    if (slot->copy != nullptr && !slot->copy->broken && slot->copy->whole) {
      for (auto& [seq, waiting] : slot->copy->ahead) {
        answers.emplace_back(
            std::move(waiting.second),
            absl::AbortedError(absl::StrCat("shard ", shard,
                                            " is served by this ps now: its old primary is "
                                            "fenced off")));
      }
      spdlog::info("backup copy of shard {}: {} change(s) applied, {} waiting dropped", shard,
                   slot->copy->applied, slot->copy->ahead.size());
      store = slot->copy->store;
      slot->copy.reset();
      slot->taken = true;
    }
  }
  for (auto& [answer, status] : answers) answer(status);
  if (store == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("this ps holds no whole copy of shard ", shard));
  }
  return store;
}

void BackupCopies::Release(int shard) {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock lock(&mu_);
    auto it = slots_.find(shard);
    if (it == slots_.end()) return;
    slot = it->second;
  }
  absl::MutexLock lock(&slot->mu);
  slot->taken = false;
}

std::vector<BackupCopies::Held> BackupCopies::Copies() const {
  std::vector<std::pair<int, std::shared_ptr<Slot>>> slots;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [shard, slot] : slots_) slots.emplace_back(shard, slot);
  }
  std::vector<Held> held;
  for (auto& [shard, slot] : slots) {
    absl::MutexLock lock(&slot->mu);
    if (slot->copy != nullptr && !slot->copy->broken && slot->copy->whole) {
      held.push_back({shard, slot->copy->store});
    }
  }
  return held;
}

void FillDigest(const VariableStore& store, const std::string& copy, proto::ReplicaState* state) {
  absl::StatusOr<uint64_t> digest = store.Digest();
  if (digest.ok()) {
    state->set_digest(*digest);
    return;
  }
  state->set_digest_error(digest.status().ToString());
  spdlog::warn("{}: no digest: {}", copy, state->digest_error());
}

void BackupCopies::States(bool digest,
                          google::protobuf::RepeatedPtrField<proto::ReplicaState>* out) const {
  std::vector<std::pair<int, std::shared_ptr<Slot>>> slots;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [shard, slot] : slots_) slots.emplace_back(shard, slot);
  }
  std::sort(slots.begin(), slots.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [shard, slot] : slots) {
    absl::MutexLock lock(&slot->mu);
    if (slot->copy == nullptr) continue;
    proto::ReplicaState* state = out->Add();
    state->set_shard(shard);
    state->set_primary(false);
    state->set_backup_ps(-1);
    state->set_backup_in_sync(!slot->copy->broken && slot->copy->whole);
    state->set_resyncing(!slot->copy->broken && !slot->copy->whole);
    state->set_seq(slot->copy->applied);
    state->set_acked(slot->copy->applied);
    if (digest) {
      FillDigest(*slot->copy->store, absl::StrCat("backup copy of shard ", shard), state);
    }
  }
}

}  // namespace pst::ps
