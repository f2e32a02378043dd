#include "chief/checkpointing.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "chief/busy_retry.h"
#include "chief/checkpoint_cut.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/safe_file.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"

namespace pst::chief {

absl::StatusOr<SaveFigures> SaveCheckpoint(
    common::PsControl& control, const std::vector<PsPeer>& ps, const ChiefOptions& options,
    const proto::ClusterState& state, int64_t step, const std::vector<int64_t>& positions,
    int epochs_completed, int closes_epoch, const SaveKind& kind) {
  const absl::Time start = absl::Now();
  SaveFigures figures;
  std::string base = kind.base;  // cleared when some ps cannot save incrementally
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
      if (phase == proto::SaveRequest::SNAPSHOT) {
        request.set_track_changes(kind.track_changes);
        request.set_base(base);
      }
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
    if (const auto unknown = std::find_if(snapshots.begin(), snapshots.end(),
                                          [](const auto& r) { return r.base_unknown(); });
        unknown != snapshots.end()) {
      // Some ps has no changes noted since the base: a full save, cut anew.
      spdlog::info(
          "shard {} has no changes noted since {} (its ps restarted, was restored or "
          "took it over since): saving a full checkpoint instead of an incremental one",
          unknown - snapshots.begin(), base);
      std::vector<proto::SaveResponse> ignored(ps.size());
      each_ps(proto::SaveRequest::DISCARD, "", &ignored).IgnoreError();  // frees the copies
      base.clear();
      figures.cut_attempts = 0;
      continue;
    }
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
  figures.name = name;
  figures.incremental = !base.empty();
  // An inexact checkpoint of this step, moved aside for this exact full
  // save: put back if the save fails, removed once it has passed its checks.
  std::string replaced;
  if (absl::StatusOr<proto::CheckpointManifest> existing = common::ReadManifest(dir);
      existing.ok()) {
    const bool valid = common::InspectCheckpoint(dir).ok();
    // A periodic save that found no cut while the workers' last pushes
    // went on, of the step the final save (no push in flight) cuts exactly.
    const bool improves = valid && existing->inexact() && figures.exact && base.empty();
    if (valid && !improves) {  // saved already
      std::vector<proto::SaveResponse> ignored(ps.size());
      each_ps(proto::SaveRequest::DISCARD, "", &ignored).IgnoreError();  // frees the copies
      // The same cut, but what it says of the epochs may be behind: a
      // periodic save that landed on the final step before the workers'
      // last epoch ends were heard. The manifest is rewritten (atomically)
      // to say what is known now; no row differs.
      if (epochs_completed > existing->epochs_completed()) {
        existing->set_epochs_completed(epochs_completed);
        PST_RETURN_IF_ERROR(common::WriteManifest(dir, *existing));
        spdlog::info("checkpoint {} was saved already; its manifest now says {} epoch(s) "
                     "completed",
                     dir, epochs_completed);
      }
      return figures;
    }
    // A checkpoint of this step that fails its checks (the job fell back
    // past it): kept for a look under another name, never deleted.
    const std::string aside =
        absl::StrCat(dir, improves ? ".inexact-" : ".unusable-", absl::ToUnixMillis(absl::Now()));
    std::error_code ec;
    std::filesystem::rename(dir, aside, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("checkpoint ", dir, " cannot be moved aside to ",
                                              aside, ": ", ec.message()));
    }
    if (improves) {
      replaced = aside;
      spdlog::info("checkpoint {} is not an exact cut; saving step {} anew as one", dir, step);
    } else {
      spdlog::warn("checkpoint {} fails its checks; moved it to {} and saving step {} anew", dir,
                   aside, step);
    }
  }
  // Phase 2: every ps writes the snapshot it kept; the manifest commits it.
  const absl::Status committed = [&]() -> absl::Status {
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
    manifest.set_closes_epoch(closes_epoch);
    manifest.set_base(base);
    manifest.set_inexact(!figures.exact);
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
    return absl::OkStatus();
  }();
  if (!replaced.empty()) {
    std::error_code ec;
    if (committed.ok()) {
      std::filesystem::remove_all(replaced, ec);
    } else {
      // The inexact one stands again.
      std::filesystem::remove_all(dir, ec);
      std::filesystem::rename(replaced, dir, ec);
    }
  }
  PST_RETURN_IF_ERROR(committed);
  figures.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  spdlog::info(
      "saved {}checkpoint {}: {:.1f} MB in {:.2f} s ({:.0f} MB/s); {} cut in {} snapshot(s), "
      "pushes held {:.2f} ms at most",
      figures.incremental ? absl::StrCat("incremental (on ", base, ") ") : "", dir,
      figures.bytes / 1e6, figures.seconds,
      figures.seconds > 0 ? figures.bytes / 1e6 / figures.seconds : 0.0,
      figures.exact ? "a consistent" : "NOT an exact", figures.cut_attempts,
      figures.locked_seconds * 1e3);
  PST_RETURN_IF_ERROR(
      common::PruneCheckpoints(options.checkpoint_dir, options.keep_checkpoints, dir));
  return figures;
}

namespace {

// A plan's logical variables (a partitioned one once, with its whole
// shape), in the plan's order.
std::vector<std::pair<std::string, std::vector<int64_t>>> ModelVariables(
    const proto::PlacementPlan& plan) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> variables;
  for (const proto::PlacementPlan::Entry& entry : plan.variables()) {
    const proto::VariableSpec& spec = entry.spec();
    const bool part = !spec.variable().empty();
    const std::string& name = part ? spec.variable() : spec.name();
    if (std::any_of(variables.begin(), variables.end(),
                    [&](const auto& v) { return v.first == name; })) {
      continue;
    }
    const common::Shape& shape = part ? spec.full_shape() : spec.shape();
    variables.emplace_back(name, std::vector<int64_t>(shape.begin(), shape.end()));
  }
  return variables;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// "a, b, c, d, ... (9 in all)".
std::string NamesText(const std::vector<std::pair<std::string, std::vector<int64_t>>>& variables) {
  constexpr size_t kShown = 4;
  std::vector<std::string> names;
  for (size_t i = 0; i < variables.size() && i < kShown; ++i) names.push_back(variables[i].first);
  std::string text = absl::StrJoin(names, ", ");
  if (variables.size() > kShown) absl::StrAppend(&text, ", ... (", variables.size(), " in all)");
  return text;
}

}  // namespace

absl::Status CheckSameModel(const std::string& root, const std::string& dir,
                            const proto::PlacementPlan& saved, const proto::PlacementPlan& job) {
  const auto theirs = ModelVariables(saved);
  const auto ours = ModelVariables(job);
  const std::map<std::string, std::vector<int64_t>> their_shapes(theirs.begin(), theirs.end());
  if (their_shapes == std::map<std::string, std::vector<int64_t>>(ours.begin(), ours.end())) {
    return absl::OkStatus();
  }
  std::string detail;
  for (const auto& [name, shape] : ours) {
    const auto it = their_shapes.find(name);
    if (it != their_shapes.end() && it->second != shape) {
      detail = absl::StrCat("its '", name, "' has shape ", ShapeText(it->second), ", this job's ",
                            ShapeText(shape));
      break;
    }
  }
  if (detail.empty()) {
    detail = absl::StrCat("its variables: ", NamesText(theirs), "; this job's: ", NamesText(ours));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      root, " holds checkpoints of another model (", std::filesystem::path(dir).filename().string(),
      ": ", detail, "): use another --checkpoint_dir or empty it"));
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
    PST_ASSIGN_OR_RETURN(proto::RestoreRequest chain, common::RestoreRequestFor(dir));
    const proto::CheckpointManifest& manifest = chain.manifest();
    PST_RETURN_IF_ERROR(CheckSameModel(options.checkpoint_dir, dir, manifest.plan(), state.plan()));
    const absl::Time start = absl::Now();
    std::vector<proto::RestoreResponse> restored(ps.size());
    PST_RETURN_IF_ERROR(ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
      if (!common::HoldsACopy(state.plan(), static_cast<int>(i))) return absl::OkStatus();
      proto::RestoreRequest request = chain;
      request.set_generation(generation);
      request.set_reset_slots(options.reset_slots);
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
        "restored from {} (step {}, written by {} ps, loaded onto {}{}): every ps read the "
        "{:.1f} MB checkpoint in {:.2f} s ({:.0f} MB/s each)",
        dir, manifest.global_step(), manifest.shards_size(), ps.size(),
        report->chain.size() > 1
            ? absl::StrCat("; an incremental one, a chain of ", report->chain.size(),
                           " links from ", report->chain.front())
            : "",
        report->chain_bytes / 1e6, secs, secs > 0 ? report->chain_bytes / 1e6 / secs : 0.0);
    return std::optional<proto::CheckpointManifest>(chain.manifest());
  }
  return std::optional<proto::CheckpointManifest>();
}

}  // namespace pst::chief
