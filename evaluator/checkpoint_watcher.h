// Which checkpoints under a checkpoint root an evaluator has yet to see: each
// committed one (it has a MANIFEST.json) newer than the last one taken,
// oldest first, checked as a restore checks it.
//
// Thread-compatible.
#ifndef PST_EVALUATOR_CHECKPOINT_WATCHER_H_
#define PST_EVALUATOR_CHECKPOINT_WATCHER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::evaluator {

// One checkpoint to evaluate.
struct FoundCheckpoint {
  std::string path;  // <root>/ckpt-<step>
  std::string name;  // ckpt-<step>
  int64_t step = 0;
  // OK when its manifest and every shard pass their checks (then
  // `manifest` is read); DataLoss naming the file otherwise.
  absl::Status problem;
  proto::CheckpointManifest manifest;
};

class CheckpointWatcher {
 public:
  // `after_step`: checkpoints of this step and older count as seen.
  explicit CheckpointWatcher(std::string root, int64_t after_step = -1)
      : root_(std::move(root)), last_step_(after_step) {}

  const std::string& root() const { return root_; }
  // The step of the last checkpoint taken (-1: none).
  int64_t last_step() const { return last_step_; }
  // Checkpoints of `step` and older count as seen.
  void SkipThrough(int64_t step) { last_step_ = std::max(last_step_, step); }

  // The oldest checkpoint newer than the last one taken, now taken; nullopt
  // when there is none yet. A directory named ckpt-<step> without a
  // MANIFEST.json is a save in progress and waits. Errors: NotFound when the
  // root does not exist; FailedPrecondition when it is not a directory or
  // cannot be listed.
  absl::StatusOr<std::optional<FoundCheckpoint>> Next();

 private:
  const std::string root_;
  int64_t last_step_;
};

}  // namespace pst::evaluator

#endif  // PST_EVALUATOR_CHECKPOINT_WATCHER_H_
