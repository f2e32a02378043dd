#include "ps_server/ps_node.h"

#include <sys/resource.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checkpoint_format.h"
#include "common/logging.h"
#include "common/safe_file.h"
#include "common/shard_reader.h"
#include "common/status_macros.h"

namespace pst::ps {

PsNode::PsNode(VariableStore* store, Options options)
    : store_(store), options_(std::move(options)), background_(kMaxBackgroundJobs) {}

absl::Status PsNode::CreateVariables(const proto::CreateVariablesRequest& request,
                                     proto::CreateVariablesResponse* response) {
  absl::StatusOr<int> created = store_->Create(request);
  if (!created.ok()) return created.status();
  response->set_created(*created);
  if (*created > 0) spdlog::info("created {} variable(s)", *created);
  return absl::OkStatus();
}

absl::Status PsNode::SetMembership(const proto::MembershipRequest& request) {
  return store_->SetMembership(request);
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
    if (phase == proto::SaveRequest::DISCARD) {
      {
        absl::MutexLock lock(&kept_mu_);
        kept_ = nullptr;
      }
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    std::string dir;
    if (phase != proto::SaveRequest::SNAPSHOT) {
      PST_ASSIGN_OR_RETURN(dir, CheckpointPath(request->checkpoint()));
    } else if (options_.checkpoint_dir.empty()) {
      PST_RETURN_IF_ERROR(CheckpointPath("").status());  // the same refusal
    }
    const int ps_index = options_.ps_index;
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
        [this, dir, path, phase, response, ps_index]() -> absl::Status {
          std::shared_ptr<const std::vector<common::ShardRecord>> records;
          const int64_t pushes_before = store_->GetStats().pushes_applied;
          if (phase == proto::SaveRequest::WRITE) {
            absl::MutexLock lock(&kept_mu_);
            if (kept_ == nullptr) {
              return absl::FailedPreconditionError(
                  "WRITE without a SNAPSHOT kept: this ps holds no snapshot to write");
            }
            records = kept_;
          } else {
            records = TakeSnapshot(response);
            if (phase == proto::SaveRequest::SNAPSHOT) {
              absl::MutexLock lock(&kept_mu_);
              kept_ = records;  // replaces an older one never written
              return absl::OkStatus();
            }
          }
          PST_RETURN_IF_ERROR(common::MakeDirectory(dir));
          PST_RETURN_IF_ERROR(common::FsyncDirectory(options_.checkpoint_dir));
          // Training comes first: on a busy machine the write takes the CPU
          // time training leaves (Linux applies a nice value to one thread).
          setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
          if (options_.save_delay > absl::ZeroDuration()) {
            // Fault injection for tests: a save slow enough to be killed during.
            spdlog::info("writing {} after a delay of {} ({})", path,
                         absl::FormatDuration(options_.save_delay), kSaveDelayEnv);
            absl::SleepFor(options_.save_delay);
          }
          const absl::Time write_start = absl::Now();
          PST_RETURN_IF_ERROR(common::WriteShardFile(path, *records, response->mutable_shard()));
          response->mutable_shard()->set_ps_index(ps_index);
          response->set_write_seconds(absl::ToDoubleSeconds(absl::Now() - write_start));
          response->set_pushes_during(store_->GetStats().pushes_applied - pushes_before);
          if (phase == proto::SaveRequest::WRITE) {
            absl::MutexLock lock(&kept_mu_);
            if (kept_ == records) kept_ = nullptr;
          }
          spdlog::info("saved {} ({} bytes) in {:.3f} s", path, response->shard().bytes(),
                       response->write_seconds());
          return absl::OkStatus();
        },
        done);
  }();
  if (!started.ok()) done(started);
}

std::shared_ptr<const std::vector<common::ShardRecord>> PsNode::TakeSnapshot(
    proto::SaveResponse* response) {
  const absl::Time start = absl::Now();
  absl::Duration held;
  VariableStore::Cut cut;
  auto records =
      std::make_shared<const std::vector<common::ShardRecord>>(store_->Snapshot(&held, &cut));
  response->set_snapshot_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  response->set_locked_seconds(absl::ToDoubleSeconds(held));
  for (proto::WorkerCut& w : cut.workers) *response->add_cut() = std::move(w);
  response->set_sync_pending(cut.sync_pending);
  response->set_max_version(cut.max_version);
  response->set_holds_dense(cut.holds_dense);
  return records;
}

void PsNode::StopBackgroundWork() { background_.Stop(); }

absl::Status PsNode::RestoreFrom(const std::string& dir, const proto::RestoreRequest& request,
                                 proto::RestoreResponse* response) {
  std::unique_ptr<VariableStore::Restorer> restorer = store_->BeginRestore();
  int64_t bytes = 0;
  for (const proto::CheckpointShard& shard : request.manifest().shards()) {
    const std::string path = absl::StrCat(dir, "/", shard.file());
    PST_ASSIGN_OR_RETURN(std::unique_ptr<common::ShardReader> reader,
                         common::ShardReader::Open(path));
    if (reader->file_bytes() != shard.bytes()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is ",
                                              reader->file_bytes(), " bytes, the manifest says ",
                                              shard.bytes()));
    }
    while (true) {
      common::ShardRecord record;
      // Records of variables this ps does not hold are checked, not kept.
      PST_ASSIGN_OR_RETURN(const bool more,
                           reader->Next(&record, [&](const proto::VariableSpec& spec) {
                             return restorer->Holds(spec);
                           }));
      if (!more) break;
      if (restorer->Holds(record.spec)) PST_RETURN_IF_ERROR(restorer->Absorb(record));
    }
    if (reader->file_crc32() != shard.crc32()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " has crc32 ",
                                              reader->file_crc32(), ", the manifest says ",
                                              shard.crc32()));
    }
    bytes += reader->file_bytes();
  }
  PST_RETURN_IF_ERROR(restorer->Commit(request.generation()));
  response->set_bytes_read(bytes);
  response->set_variables_restored(store_->GetStats().num_variables);
  spdlog::info("restored {} variable(s) from {} ({} bytes read), generation {}",
               response->variables_restored(), dir, bytes, request.generation());
  return absl::OkStatus();
}

void PsNode::Restore(const proto::RestoreRequest* request, proto::RestoreResponse* response,
                     Done done) {
  absl::Status started = [&]() -> absl::Status {
    PST_ASSIGN_OR_RETURN(const std::string dir, CheckpointPath(request->checkpoint()));
    PST_RETURN_IF_ERROR(common::CheckManifestShards(request->manifest()));
    return background_.Start(
        "restore", [this, dir, request, response] { return RestoreFrom(dir, *request, response); },
        done);
  }();
  if (!started.ok()) done(started);
}

void PsNode::Health(proto::HealthResponse* response) const {
  VariableStore::Stats stats = store_->GetStats();
  response->set_task(options_.task);
  response->set_incarnation(options_.incarnation);
  response->set_num_variables(stats.num_variables);
  response->set_num_elements(stats.num_elements);
  response->set_pushes_applied(stats.pushes_applied);
  response->set_hash_rows(stats.hash_rows);
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
