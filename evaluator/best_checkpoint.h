// The best checkpoint so far by one metric, kept in <root>/best/ as Keras's
// ModelCheckpoint(save_best_only=True) keeps its file: a complete
// checkpoint (MANIFEST.json and its shards, hard links to the original's
// files where the file system allows, else copies; an incremental
// checkpoint's chain folded into whole shards) plus BEST.json naming
// the metric, its value, the mode and the checkpoint it came from. `pstrain
// checkpoint export <root>/best out.safetensors` reads it as any other.
//
// The directory is replaced whole: the new one is made as best.tmp and
// renamed into place, so best/ is always one complete checkpoint. It is
// not named ckpt-*, so the chief never restores it or prunes it.
//
// Thread-compatible.
#ifndef PST_EVALUATOR_BEST_CHECKPOINT_H_
#define PST_EVALUATOR_BEST_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace pst::evaluator {

inline constexpr char kBestDir[] = "best";
inline constexpr char kBestFile[] = "BEST.json";

enum class BestMode { kAuto, kMax, kMin };

// "auto", "max" or "min"; InvalidArgument for anything else.
absl::StatusOr<BestMode> ParseBestMode(const std::string& text);

class BestCheckpoint {
 public:
  // `metric`: the metric to compare ("" picks the first of test_accuracy,
  // test_auc, accuracy and auc that an evaluation reports). kAuto
  // minimizes a metric whose name contains "loss" or "error" and maximizes
  // any other. The best so far is read back from <root>/best/BEST.json when
  // there is one, so a restarted evaluator goes on comparing with it.
  BestCheckpoint(std::string root, std::string metric, BestMode mode);

  // Whether the checkpoint at `path` (of `step`), evaluated as `metrics`, is
  // better than the best so far; if so it is now the one in best/. False
  // (and nothing changes) when `metrics` lacks the metric. Errors: Internal
  // naming the file that could not be linked, copied or renamed (best/ is
  // then as it was).
  absl::StatusOr<bool> Offer(const std::string& path, int64_t step,
                             const std::map<std::string, double>& metrics);

  // The metric compared ("" until chosen) and the best value (nullopt
  // before the first).
  const std::string& metric() const { return metric_; }
  std::optional<double> best_value() const { return best_; }

 private:
  bool Better(double value) const;
  absl::Status Replace(const std::string& path, int64_t step, double value);

  const std::string root_;
  std::string metric_;
  const BestMode mode_;
  std::optional<double> best_;
};

}  // namespace pst::evaluator

#endif  // PST_EVALUATOR_BEST_CHECKPOINT_H_
