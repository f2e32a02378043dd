#include "ps_server/node/ps_node.h"

#include <sys/resource.h>
#include <unistd.h>

#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checkpoint_format.h"
#include "common/logging.h"
#include "common/safe_file.h"
#include "common/shard_reader.h"
#include "common/status_macros.h"
#include "ps_server/node/call_join.h"

namespace pst::ps {

namespace {

// The store a ps was built with, shared without being owned.
std::shared_ptr<VariableStore> Unowned(VariableStore* store) {
  return std::shared_ptr<VariableStore>(store, [](VariableStore*) {});
}

}  // namespace

PsNode::PsNode(VariableStore* store, Options options)
    : store_(store),
      options_(std::move(options)),
      own_(std::make_shared<Primary>(Primary{
          options_.ps_index, Unowned(store),
          std::make_unique<ReplicaSource>(options_.ps_index, options_.incarnation), false})),
      backups_(options_.store_options),
      background_(kMaxBackgroundJobs) {}

void PsNode::CreateVariables(const proto::CreateVariablesRequest* request,
                             proto::CreateVariablesResponse* response, Done done) {
  if (request->has_copies()) {
    const int backup = request->copies().backup();
    if (backup < 0 || backup == options_.ps_index ||
        request->copies().primary() != options_.ps_index) {
      done(absl::InvalidArgumentError(
          absl::StrCat("ps ", options_.ps_index, " was asked to hold shard ",
                       request->copies().primary(), " with its backup on ps ", backup,
                       ": a shard's primary is the ps it was sent to, and "
                       "its backup another ps")));
      return;
    }
    if (!options_.link_to) {
      done(absl::FailedPreconditionError("this ps cannot reach other ps to keep a backup"));
      return;
    }
    // The source of this ps's shard where it is served here now.
    std::shared_ptr<Primary> home = PrimaryOfShard(options_.ps_index);
    if (home == nullptr) home = own_;
    // A first backup; or, before a restore of every copy, a new stream.
    if (!home->source->has_backup() || request->restart_backup()) {
      std::unique_ptr<ReplicaLink> link = options_.link_to(backup);
      if (link == nullptr) {
        done(absl::InvalidArgumentError(absl::StrCat("the backup of shard ", options_.ps_index,
                                                     " is on ps ", backup,
                                                     ", which is not in this cluster")));
        return;
      }
      home->source->SetBackup(backup, std::move(link), request->restart_backup());
    }
  }
  // A shard promoted here is created again (idempotently) on this ps by a
  // restarted chief: its request names its variables.
  std::shared_ptr<Primary> p =
      request->variables_size() > 0 ? PrimaryFor(request->variables(0).name()) : own_;
  p->source->Change(
      [&](proto::ReplicateRequest* change) -> absl::Status {
        absl::StatusOr<int> created = p->store->Create(*request);
        if (!created.ok()) return created.status();
        response->set_created(*created);
        if (*created > 0) spdlog::info("created {} variable(s)", *created);
        *change->mutable_create() = *request;
        change->mutable_create()->clear_copies();
        change->mutable_create()->clear_restart_backup();
        return absl::OkStatus();
      },
      std::move(done));
}

void PsNode::SetMembership(const proto::MembershipRequest* request, proto::MembershipResponse*,
                           Done done) {
  // Every shard served here takes it; the first error is the answer.
  std::vector<std::shared_ptr<Primary>> primaries = Primaries();
  if (primaries.empty()) {  // only backup copies here: their primaries forward it
    done(absl::OkStatus());
    return;
  }
  auto join = std::make_shared<CallJoin>(static_cast<int>(primaries.size()), std::move(done));
  for (const std::shared_ptr<Primary>& p : primaries) {
    p->source->Change(
        [&](proto::ReplicateRequest* change) -> absl::Status {
          PST_RETURN_IF_ERROR(p->store->SetMembership(*request));
          *change->mutable_membership() = *request;
          return absl::OkStatus();
        },
        [join](absl::Status s) { join->Part(std::move(s)); });
  }
}

void PsNode::Replicate(std::shared_ptr<const proto::ReplicateRequest> request, Done done) {
  backups_.Apply(std::move(request), std::move(done));
}

absl::StatusOr<std::string> PsNode::CheckpointPath(const std::string& name) const {
  if (options_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError(
        "this ps has no --checkpoint_dir: it neither saves nor restores checkpoints (give every "
        "ps and the chief the same shared directory)");
  }
  PST_RETURN_IF_ERROR(common::CheckCheckpointName(name));
  return absl::StrCat(options_.checkpoint_dir, "/", name);
}

void PsNode::Save(const proto::SaveRequest* request, proto::SaveResponse* response, Done done) {
  absl::Status started = [&]() -> absl::Status {
    const proto::SaveRequest::Phase phase = request->phase();
    const int shard = request->has_shard() ? request->shard() : options_.ps_index;
    if (phase == proto::SaveRequest::DISCARD) {
      {
        absl::MutexLock lock(&kept_mu_);
        kept_.erase(shard);
      }
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    std::shared_ptr<Primary> primary = PrimaryOfShard(shard);
    if (primary == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("ps ", options_.ps_index, " does not serve shard ", shard));
    }
    if (!request->base().empty()) PST_RETURN_IF_ERROR(common::CheckCheckpointName(request->base()));
    std::string dir;
    if (phase != proto::SaveRequest::SNAPSHOT) {
      PST_ASSIGN_OR_RETURN(dir, CheckpointPath(request->checkpoint()));
    } else if (options_.checkpoint_dir.empty()) {
      PST_RETURN_IF_ERROR(CheckpointPath("").status());  // the same refusal
    }
    const int ps_index = shard;  // the shard's file
    if (request->num_ps() < 1 || ps_index >= request->num_ps()) {
      return absl::InvalidArgumentError(
          absl::StrCat("save of a job of ", request->num_ps(), " ps sent to ps ", ps_index));
    }
    if (request->incarnation() != options_.incarnation) {
      // Restarted since the chief last looked: the variables it would save
      // are not the job's (none, or not yet restored).
      return absl::FailedPreconditionError(absl::StrFormat(
          "this ps is incarnation %016x, not %016x: it restarted and lost its variables, and "
          "saves nothing until the chief has restored it",
          options_.incarnation, request->incarnation()));
    }
    const std::string path =
        dir.empty() ? std::string()
                    : absl::StrCat(dir, "/", common::ShardFileName(ps_index, request->num_ps()));
    return background_.Start(
        "save",
        [this, dir, path, phase, request, response, ps_index,
         store = primary->store]() -> absl::Status {
          Kept snapshot;
          const int64_t pushes_before = store->GetStats().pushes_applied;
          if (phase == proto::SaveRequest::WRITE) {
            absl::MutexLock lock(&kept_mu_);
            auto kept = kept_.find(ps_index);
            if (kept == kept_.end()) {
              return absl::FailedPreconditionError(
                  "WRITE without a SNAPSHOT kept: this ps holds no snapshot to write");
            }
            snapshot = kept->second;
          } else {
            if (phase == proto::SaveRequest::SNAPSHOT) {
              // A snapshot kept and not written is replaced by this one:
              // dropped first, so that no push waits on it for its copy.
              absl::MutexLock lock(&kept_mu_);
              kept_.erase(ps_index);
            }
            // The dense variables are not copied: the records read them as
            // they are written, and a push before that copies within a
            // budget (dense_snapshot.h).
            PST_ASSIGN_OR_RETURN(
                snapshot, TakeSnapshot(store, *request, response, options_.snapshot_copy_budget,
                                       options_.checkpoint_dir));
            if (response->base_unknown()) return absl::OkStatus();  // nothing kept
            if (phase == proto::SaveRequest::SNAPSHOT) {
              absl::MutexLock lock(&kept_mu_);
              kept_[ps_index] = snapshot;  // replaces an older one never written
              return absl::OkStatus();
            }
          }
          const std::shared_ptr<const std::vector<common::ShardRecord>>& records = snapshot.records;
          PST_RETURN_IF_ERROR(common::MakeDirectory(dir));
          PST_RETURN_IF_ERROR(common::FsyncDirectory(options_.checkpoint_dir));
          // Training comes first: on a busy machine the write of a copied
          // snapshot takes the CPU time training leaves (Linux applies a
          // nice value to one thread). Not that of a copy-on-write one,
          // which pushes may wait for.
          if (options_.snapshot_copy_budget <= 0) {
            setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
          }
          if (options_.save_delay > absl::ZeroDuration()) {
            // Fault injection for tests: a save slow enough to be killed during.
            spdlog::info("writing {} after a delay of {} (fault injection for tests)", path,
                         absl::FormatDuration(options_.save_delay));
            absl::SleepFor(options_.save_delay);
          }
          const absl::Time write_start = absl::Now();
          PST_RETURN_IF_ERROR(common::WriteShardFile(path, *records, response->mutable_shard()));
          response->mutable_shard()->set_ps_index(ps_index);
          response->set_write_seconds(absl::ToDoubleSeconds(absl::Now() - write_start));
          response->set_pushes_during(store->GetStats().pushes_applied - pushes_before);
          if (phase == proto::SaveRequest::WRITE) {
            absl::MutexLock lock(&kept_mu_);
            auto kept = kept_.find(ps_index);
            if (kept != kept_.end() && kept->second.records == records) kept_.erase(kept);
          }
          // The base of the next incremental snapshot of its store.
          if (snapshot.seq > 0)
            snapshot.store->SnapshotWritten(snapshot.seq, request->checkpoint());
          spdlog::info("saved {} ({} bytes) in {:.3f} s", path, response->shard().bytes(),
                       response->write_seconds());
          return absl::OkStatus();
        },
        done);
  }();
  if (!started.ok()) done(started);
}

absl::StatusOr<PsNode::Kept> PsNode::TakeSnapshot(const std::shared_ptr<VariableStore>& store,
                                                  const proto::SaveRequest& request,
                                                  proto::SaveResponse* response, double copy_budget,
                                                  const std::string& spill_dir) {
  const absl::Time start = absl::Now();
  absl::Duration held;
  VariableStore::Cut cut;
  VariableStore::SnapshotChanges changes;
  changes.track = request.track_changes();
  changes.base = request.base();
  Kept kept;
  kept.store = store;
  kept.records = std::make_shared<const std::vector<common::ShardRecord>>(
      store->Snapshot(&held, &cut, copy_budget, &changes, spill_dir));
  PST_RETURN_IF_ERROR(cut.error);
  if (cut.base_unknown) {
    response->set_base_unknown(true);
    return kept;
  }
  kept.seq = cut.seq;
  response->set_snapshot_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  response->set_locked_seconds(absl::ToDoubleSeconds(held));
  for (proto::WorkerCut& w : cut.workers) *response->add_cut() = std::move(w);
  response->set_sync_pending(cut.sync_pending);
  response->set_max_version(cut.max_version);
  response->set_holds_dense(cut.holds_dense);
  response->set_holds_any(cut.holds_any);
  return kept;
}

void PsNode::StopBackgroundWork() { background_.Stop(); }

namespace {

// Absorbs every shard of the checkpoint `dir` (one link of a chain) into
// `restorers`, checking each file's size and crc32 against `manifest`.
// Returns the bytes read.
absl::StatusOr<int64_t> AbsorbLink(const std::string& dir,
                                   const proto::CheckpointManifest& manifest,
                                   std::span<VariableStore::Restorer* const> restorers) {
  int64_t bytes = 0;
  for (const proto::CheckpointShard& shard : manifest.shards()) {
    const std::string path = absl::StrCat(dir, "/", shard.file());
    PST_ASSIGN_OR_RETURN(std::unique_ptr<common::ShardReader> reader,
                         common::ShardReader::Open(path));
    if (reader->file_bytes() != shard.bytes()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is ",
                                              reader->file_bytes(), " bytes, the manifest says ",
                                              shard.bytes()));
    }
    PST_RETURN_IF_ERROR(AbsorbShard(*reader, restorers));
    if (reader->file_crc32() != shard.crc32()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " has crc32 ",
                                              reader->file_crc32(), ", the manifest says ",
                                              shard.crc32()));
    }
    bytes += reader->file_bytes();
  }
  return bytes;
}

}  // namespace

absl::Status PsNode::RestoreFrom(const std::string& dir, const proto::RestoreRequest& request,
                                 proto::RestoreResponse* response) {
  // This ps's shard, then the backup copies it holds: every copy is
  // restored from the same checkpoint, so a primary and its backup agree.
  std::vector<BackupCopies::Held> copies = backups_.Copies();
  for (const std::shared_ptr<Primary>& p : Primaries()) {
    if (p->promoted) copies.push_back({p->shard, p->store});
  }
  std::vector<std::unique_ptr<VariableStore::Restorer>> restorers;
  restorers.push_back(store_->BeginRestore(request.reset_slots()));
  for (const BackupCopies::Held& copy : copies) {
    restorers.push_back(copy.store->BeginRestore(request.reset_slots()));
  }
  std::vector<VariableStore::Restorer*> all;
  for (const auto& restorer : restorers) all.push_back(restorer.get());
  int64_t bytes = 0;
  // An incremental checkpoint's chain first, link by link, then itself.
  std::vector<std::pair<std::string, const proto::CheckpointManifest*>> links;
  for (const proto::CheckpointLink& link : request.chain()) {
    PST_ASSIGN_OR_RETURN(std::string link_dir, CheckpointPath(link.checkpoint()));
    links.emplace_back(std::move(link_dir), &link.manifest());
  }
  links.emplace_back(dir, &request.manifest());
  for (size_t i = 0; i < links.size(); ++i) {
    if (i > 0) {
      for (VariableStore::Restorer* r : all) r->NextLink();
    }
    PST_ASSIGN_OR_RETURN(const int64_t read, AbsorbLink(links[i].first, *links[i].second, all));
    bytes += read;
  }
  PST_RETURN_IF_ERROR(restorers[0]->Commit(request.generation()));
  for (size_t i = 1; i < restorers.size(); ++i) {
    if (absl::Status s = restorers[i]->Commit(request.generation()); !s.ok()) {
      spdlog::error("restoring the copy of shard {}: {}", copies[i - 1].shard, s.ToString());
    }
  }
  response->set_bytes_read(bytes);
  response->set_variables_restored(store_->GetStats().num_variables);
  spdlog::info("restored {} variable(s){} from {} ({} bytes read), generation {}",
               response->variables_restored(),
               copies.empty() ? "" : absl::StrCat(" and ", copies.size(), " other cop(ies)"), dir,
               bytes, request.generation());
  return absl::OkStatus();
}

void PsNode::Restore(const proto::RestoreRequest* request, proto::RestoreResponse* response,
                     Done done) {
  absl::Status started = [&]() -> absl::Status {
    PST_ASSIGN_OR_RETURN(const std::string dir, CheckpointPath(request->checkpoint()));
    PST_RETURN_IF_ERROR(common::CheckManifestShards(request->manifest()));
    for (const proto::CheckpointLink& link : request->chain()) {
      PST_RETURN_IF_ERROR(CheckpointPath(link.checkpoint()).status());
      PST_RETURN_IF_ERROR(common::CheckManifestShards(link.manifest()));
    }
    return background_.Start(
        "restore", [this, dir, request, response] { return RestoreFrom(dir, *request, response); },
        done);
  }();
  if (!started.ok()) done(started);
}

void PsNode::Health(const proto::HealthRequest& request, proto::HealthResponse* response) const {
  int64_t max_version = 0;
  for (const std::shared_ptr<Primary>& p : Primaries()) {
    if (p->promoted) max_version = std::max(max_version, p->store->GetStats().max_version);
    if (!p->promoted && !p->source->has_backup()) continue;
    proto::ReplicaState* state = response->add_replicas();
    p->source->State(state);
    if (request.digest()) {
      p->source->Quiesced([&](int64_t seq) {
        state->set_seq(seq);
        FillDigest(*p->store, absl::StrCat("shard ", p->shard), state);
      });
    }
  }
  backups_.States(request.digest(), response->mutable_replicas());
  {
    absl::MutexLock lock(&primaries_mu_);
    response->set_roles_version(roles_version_);
  }
  VariableStore::Stats stats = store_->GetStats();
  stats.max_version = std::max(stats.max_version, max_version);
  response->set_task(options_.task);
  response->set_incarnation(options_.incarnation);
  response->set_num_variables(stats.num_variables);
  response->set_num_elements(stats.num_elements);
  response->set_pushes_applied(stats.pushes_applied);
  response->set_hash_rows(stats.hash_rows);
  const VariableStore::Stats::TableFigures tables = stats.AllTables();
  response->set_table_evictions(tables.evictions);
  response->set_table_rows_on_disk(tables.rows_on_disk);
  response->set_table_disk_reads(tables.disk_reads);
  response->set_table_disk_writes(tables.disk_writes);
  response->set_nonfinite_skipped(stats.nonfinite_skipped);
  response->set_gradients_applied(stats.gradients_applied);
  response->set_staleness_sum(stats.staleness_sum);
  response->set_staleness_max(stats.staleness_max);
  response->set_stale_dropped(stats.stale_dropped);
  response->set_duplicates_ignored(stats.duplicates_ignored);
  response->set_parked_pulls(stats.parked_pulls);
  response->set_parked_seconds(stats.parked_seconds);
  response->set_max_clock_gap(stats.max_clock_gap);
  response->set_generation(stats.generation);
  response->set_max_version(stats.max_version);
  for (const auto& [worker, position] : stats.worker_positions) {
    (*response->mutable_worker_positions())[worker] = position;
  }
}

}  // namespace pst::ps
