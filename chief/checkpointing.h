// Checkpoints from the chief's side, over common::PsControl: a save of every
// ps as one consistent cut, committed by its manifest, and a restore of
// every ps from the newest checkpoint that passes its checks.
//
// A save goes in two phases. SNAPSHOT: every ps copies its variables at one
// instant, holding pushes for the copy, and answers what the copy holds of
// each worker's pushes; again until the copies form one cut (or, after
// kCutAttempts, each worker at its lowest position anywhere: a manifest
// marked inexact, which a later exact full save of its step replaces).
// WRITE: every ps writes its copy; the chief then writes the manifest,
// which commits the checkpoint, checks it as a restore would, and prunes
// older ones.
//
// An incremental save (SaveKind.base) asks every ps for what changed since
// the chain's last link only, and names that link in its manifest
// (common/checkpoint_chain.h). When some ps cannot (it restarted, was
// restored or took over a shard since: it tracks no changes since that
// link), the save is a full one instead.
//
// Thread-compatible: one save or restore at a time.
#ifndef PST_CHIEF_CHECKPOINTING_H_
#define PST_CHIEF_CHECKPOINTING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/chief.h"
#include "chief/ps_peers.h"
#include "common/ps_control.h"
#include "proto/pstrain.pb.h"

namespace pst::chief {

// A save's place in a chain of incremental checkpoints.
struct SaveKind {
  // Every ps notes which rows change from this save on, for incremental
  // saves on it (SaveRequest.track_changes): incremental saves are on.
  bool track_changes = false;
  // Incremental on this checkpoint ("ckpt-<digits>", the chain's last
  // link, saved with track_changes); "": a full save.
  std::string base;
};

// What one save took.
struct SaveFigures {
  std::string name;  // the checkpoint's directory name
  bool incremental = false;
  int64_t step = 0;
  int64_t bytes = 0;
  double seconds = 0;           // from the first request to the manifest
  double snapshot_seconds = 0;  // longest snapshot (the copy in memory) on a ps
  double locked_seconds = 0;    // longest time a ps held pushes for its snapshot
  int64_t pushes_during = 0;    // most pushes a ps applied during its save
  int cut_attempts = 0;         // snapshots taken until they formed one cut
  bool exact = false;           // a consistent cut (else lowest positions)
};

// How long a save or restore waits for a ps busy with earlier ones (a
// restarted chief's predecessor may have left one running).
constexpr absl::Duration kBusyBudget = absl::Seconds(30);

// Snapshots tried for one consistent cut before saving an inexact one.
constexpr int kCutAttempts = 30;

// Saves a checkpoint of every ps at `step` (the version the snapshots hold,
// when they hold one) with the workers at `positions` and every worker
// through `epochs_completed` epochs (`closes_epoch`: cut with every worker
// held at the end of that epoch; 0: at another time), and commits it with
// the manifest under options.checkpoint_dir. In a replicated job each
// shard is saved by the ps serving it (state.plan().shards: one copy). Errors: the first ps's
// failure, naming it; DataLoss when the checkpoint written fails its checks (older ones are kept);
// Internal when an unusable checkpoint of the same step cannot be moved aside.
absl::StatusOr<SaveFigures> SaveCheckpoint(
    common::PsControl& control, const std::vector<PsPeer>& ps, const ChiefOptions& options,
    const proto::ClusterState& state, int64_t step, const std::vector<int64_t>& positions,
    int epochs_completed = 0, int closes_epoch = 0, const SaveKind& kind = {});

// OK when the checkpoint `dir` (under the root `root`), whose manifest has
// the plan `saved`, is of the model of a job planned as `job`: the same
// logical variables with the same shapes, however placed and partitioned.
// Otherwise FailedPrecondition saying that `root` holds another model's
// checkpoints, naming a variable whose shape differs or both models'
// variables.
absl::Status CheckSameModel(const std::string& root, const std::string& dir,
                            const proto::PlacementPlan& saved, const proto::PlacementPlan& job);

// Restores every ps from the newest checkpoint that passes its checks, into
// restore generation `generation`; an unusable one is reported by name and
// the next older is tried. In a replicated job, every ps that holds a copy
// of some shard under state.plan().shards (each restores every copy it
// holds). Returns the manifest of the checkpoint restored, or nullopt when
// there is none. Errors: the first ps's failure, naming it and the
// checkpoint; FailedPrecondition (CheckSameModel) when the newest usable
// checkpoint is of another model.
absl::StatusOr<std::optional<proto::CheckpointManifest>> RestoreLatest(
    common::PsControl& control, const std::vector<PsPeer>& ps, const ChiefOptions& options,
    int64_t generation, const proto::ClusterState& state);

}  // namespace pst::chief

#endif  // PST_CHIEF_CHECKPOINTING_H_
