// Whether the snapshots every ps took for one checkpoint form a single
// consistent cut, and the workers' data positions in it.
//
// Each ps holds the store exclusively for its copy, so one snapshot is one
// instant of that ps; but the ps snapshot at slightly different instants.
// A worker pushes every step to every ps that holds dense variables, in
// parallel: a snapshot taken on one ps after the step arrived there and on
// another before it did holds half of that step. The cut is consistent
// when, for every worker, every ps holding dense variables holds the same
// last step and data position of it (or none), with no step half applied
// on any one ps; and, in SYNC mode, when no ps holds gradients accumulated
// but not applied and every ps is at the same version. Then the manifest's
// positions match exactly the pushes the shards contain.
//
// Row pushes (sparse tables) are not part of the check: a step need not
// push rows to every ps.
//
// Thread-safety: a pure function.
#ifndef PST_CHIEF_CHECKPOINT_CUT_H_
#define PST_CHIEF_CHECKPOINT_CUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::chief {

// Each worker's position in the cut `snapshots` (one SNAPSHOT answer per
// ps) form; a worker no ps holds a push of keeps `fallback[w]` (its
// position when the ps were last restored or created). Errors: Aborted
// naming the first worker or ps that differs (take the snapshots again);
// InvalidArgument for a worker index outside `fallback`.
absl::StatusOr<std::vector<int64_t>> CutPositions(
    const std::vector<proto::SaveResponse>& snapshots, bool sync,
    const std::vector<int64_t>& fallback);

// When no consistent cut can be had (a worker died half-way through a
// step, so its step stays half applied): for each worker the lowest
// position any ps holding dense variables has of it, so that no batch is
// skipped on restore (some are applied again on the ps that had them).
std::vector<int64_t> LowestPositions(const std::vector<proto::SaveResponse>& snapshots,
                                     const std::vector<int64_t>& fallback);

}  // namespace pst::chief

#endif  // PST_CHIEF_CHECKPOINT_CUT_H_
