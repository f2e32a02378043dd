#include "chief/checkpointing.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "chief/busy_retry.h"
#include "chief/checkpoint_cut.h"
#include "common/checkpoint_format.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/safe_file.h"
#include "common/status_macros.h"

namespace pst::chief {

absl::StatusOr<SaveFigures> SaveCheckpoint(common::PsControl& control,
                                           const std::vector<PsPeer>& ps,
                                           const ChiefOptions& options,
                                           const proto::ClusterState& state, int64_t step,
                                           const std::vector<int64_t>& positions,
                                           int epochs_completed) {
  const absl::Time start = absl::Now();
  SaveFigures figures;
  // Phase 1: every ps snapshots (holding pushes for the instant of its
  // copy), again until the snapshots form one cut.
  // Shard i is saved by the ps serving it: ps i, but after a failover.
  const bool replicated = state.plan().replicas() == 2;
  auto each_ps = [&](proto::SaveRequest::Phase phase, const std::string& name,
                     std::vector<proto::SaveResponse>* answers) {
    return ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
      const int target = common::PrimaryOf(state.plan(), static_cast<int>(i));
      proto::SaveRequest request;
      request.set_phase(phase);
      request.set_checkpoint(name);
      request.set_num_ps(static_cast<int>(ps.size()));
      request.set_incarnation(ps[target].incarnation);
      if (replicated) request.set_shard(static_cast<int>(i));
      return CallWhileBusy(
          [&]() -> absl::Status {
            (*answers)[i].Clear();
            absl::StatusOr<proto::SaveResponse> s =
                control.Save(target, request, absl::Minutes(10));
            if (!s.ok()) {
              return absl::Status(s.status().code(),
                                  absl::StrCat("saving shard ", i, " on ps ", target, " at ",
                                               ps[target].address, ": ", s.status().message()));
            }
            (*answers)[i] = *std::move(s);
            return absl::OkStatus();
          },
          kBusyBudget);
    });
  };
  const bool sync = state.training().sync().mode() == proto::SYNC;
  std::vector<proto::SaveResponse> snapshots(ps.size());
  std::optional<std::vector<int64_t>> cut_positions;
  absl::Status disagreement;
  for (figures.cut_attempts = 1;; ++figures.cut_attempts) {
    PST_RETURN_IF_ERROR(each_ps(proto::SaveRequest::SNAPSHOT, "", &snapshots));
    absl::StatusOr<std::vector<int64_t>> agreed = CutPositions(snapshots, sync, positions);
    if (agreed.ok()) {
      cut_positions = *std::move(agreed);
      break;
    }
    if (agreed.status().code() != absl::StatusCode::kAborted) return agreed.status();
    disagreement = agreed.status();
    if (figures.cut_attempts >= kCutAttempts) break;
    absl::SleepFor(absl::Milliseconds(1 << std::min(figures.cut_attempts - 1, 6)));
  }
  figures.exact = cut_positions.has_value();
  if (!figures.exact) {
    spdlog::warn(
        "no consistent cut in {} snapshots ({}): saving with each worker at its lowest "
        "position on any ps, so a restore applies some batches again",
        figures.cut_attempts, disagreement.message());
    cut_positions = LowestPositions(snapshots, positions);
  }
  for (const proto::SaveResponse& r : snapshots) {
    figures.snapshot_seconds = std::max(figures.snapshot_seconds, r.snapshot_seconds());
    figures.locked_seconds = std::max(figures.locked_seconds, r.locked_seconds());
  }
  int64_t cut_step = 0;
  for (const proto::SaveResponse& r : snapshots) cut_step = std::max(cut_step, r.max_version());
  if (cut_step > 0) step = cut_step;  // the version the shards hold
  figures.step = step;

  const std::string name = common::CheckpointDirName(step);
  const std::string dir = absl::StrCat(options.checkpoint_dir, "/", name);
  if (common::ReadManifest(dir).ok()) {
    if (common::InspectCheckpoint(dir).ok()) {  // saved already
      std::vector<proto::SaveResponse> ignored(ps.size());
      each_ps(proto::SaveRequest::DISCARD, "", &ignored).IgnoreError();  // frees the copies
      return figures;
    }
    // A checkpoint of this step that fails its checks (the job fell back
    // past it): kept for a look under another name, never deleted.
    const std::string aside = absl::StrCat(dir, ".unusable-", absl::ToUnixMillis(absl::Now()));
    std::error_code ec;
    std::filesystem::rename(dir, aside, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("checkpoint ", dir, " fails its checks and cannot ",
                                              "be moved aside to ", aside, ": ", ec.message()));
    }
    spdlog::warn("checkpoint {} fails its checks; moved it to {} and saving step {} anew", dir,
                 aside, step);
  }
  // Phase 2: every ps writes the snapshot it kept.
  std::vector<proto::SaveResponse> saved(ps.size());
  absl::Status written = each_ps(proto::SaveRequest::WRITE, name, &saved);
  if (!written.ok()) {
    // Not a checkpoint (it has no manifest); remove what was written.
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    return written;
  }
  proto::CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_global_step(step);
  *manifest.mutable_plan() = state.plan();
  *manifest.mutable_training() = state.training();
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  for (int64_t p : *cut_positions) manifest.add_worker_positions(p);
  manifest.set_epochs_completed(epochs_completed);
  for (const proto::SaveResponse& r : saved) {
    *manifest.add_shards() = r.shard();
    figures.bytes += r.shard().bytes();
    figures.pushes_during = std::max(figures.pushes_during, r.pushes_during());
  }
  PST_RETURN_IF_ERROR(common::WriteManifest(dir, manifest));
  PST_RETURN_IF_ERROR(common::FsyncDirectory(options.checkpoint_dir));
  // Nothing older is removed until this one passes every check a restore
  // makes.
  if (absl::StatusOr<common::CheckpointReport> checked = common::InspectCheckpoint(dir);
      !checked.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", dir, " was written but fails its checks (",
                     checked.status().message(), "); older checkpoints are kept"));
  }
  figures.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  spdlog::info(
      "saved checkpoint {}: {:.1f} MB in {:.2f} s ({:.0f} MB/s); {} cut in {} snapshot(s), "
      "pushes held {:.2f} ms at most",
      dir, figures.bytes / 1e6, figures.seconds,
      figures.seconds > 0 ? figures.bytes / 1e6 / figures.seconds : 0.0,
      figures.exact ? "a consistent" : "NOT an exact", figures.cut_attempts,
      figures.locked_seconds * 1e3);
  PST_RETURN_IF_ERROR(
      common::PruneCheckpoints(options.checkpoint_dir, options.keep_checkpoints, dir));
  return figures;
}

absl::StatusOr<std::optional<proto::CheckpointManifest>> RestoreLatest(
    common::PsControl& control, const std::vector<PsPeer>& ps, const ChiefOptions& options,
    int64_t generation, const proto::ClusterState& state) {
  for (const std::string& dir : common::ListCheckpoints(options.checkpoint_dir)) {
    absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(dir);
    if (!report.ok()) {
      spdlog::warn("checkpoint {} is unusable, trying an older one: {}", dir,
                   report.status().message());
      continue;
    }
    PST_ASSIGN_OR_RETURN(proto::CheckpointManifest manifest, common::ReadManifest(dir));
    const absl::Time start = absl::Now();
    std::vector<proto::RestoreResponse> restored(ps.size());
    PST_RETURN_IF_ERROR(ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
      if (!common::HoldsACopy(state.plan(), static_cast<int>(i))) return absl::OkStatus();
      proto::RestoreRequest request;
      request.set_checkpoint(std::filesystem::path(dir).filename().string());
      *request.mutable_manifest() = manifest;
      request.set_generation(generation);
      return CallWhileBusy(
          [&]() -> absl::Status {
            absl::StatusOr<proto::RestoreResponse> s =
                control.Restore(static_cast<int>(i), request, absl::Minutes(10));
            if (!s.ok()) {
              return absl::Status(s.status().code(),
                                  absl::StrCat("restoring ps ", i, " at ", ps[i].address, " from ",
                                               dir, ": ", s.status().message()));
            }
            restored[i] = *std::move(s);
            return absl::OkStatus();
          },
          kBusyBudget);
    }));
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    spdlog::info(
        "restored from {} (step {}, written by {} ps, loaded onto {}): every ps read the "
        "{:.1f} MB checkpoint in {:.2f} s ({:.0f} MB/s each)",
        dir, manifest.global_step(), manifest.shards_size(), ps.size(), report->total_bytes / 1e6,
        secs, secs > 0 ? report->total_bytes / 1e6 / secs : 0.0);
    return std::optional<proto::CheckpointManifest>(std::move(manifest));
  }
  return std::optional<proto::CheckpointManifest>();
}

}  // namespace pst::chief
