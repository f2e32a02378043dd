// SYNC mode for row pushes (PushRows): the per-id sum of one variable's (or
// partition's) row gradients for the step in flight, and the workers who
// sent them. A step's pushes are summed per id as they arrive; once
// `quorum` workers have pushed, the mean is taken (each id's sum divided by
// the number of pushes aggregated, whatever ids each push held, so that W
// workers make the step one process makes on their combined batch) and
// applied once, by the caller. A push for a step already applied is stale;
// a second push of one worker for the step in flight is a duplicate (a
// retry); neither adds anything.
//
// It holds no variable: the caller passes the variable's version (the
// steps applied so far, one per aggregate applied) and applies TakeMean's
// rows with the optimizer (Variable::ApplyRows), which moves the version on
// by one.
//
// Thread-compatible: VariableStore keeps one per row variable and guards it
// with the mutex beside it (RowAggregates). The ids are the variable's local
// rows (hash variables: the ids themselves).
#ifndef PST_PS_SERVER_STORE_ROW_AGGREGATE_H_
#define PST_PS_SERVER_STORE_ROW_AGGREGATE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace pst::ps {

class RowAggregate {
 public:
  explicit RowAggregate(int64_t dim) : dim_(dim) {}

  enum class Add {
    kAdded,      // summed into the step in flight
    kStale,      // for a step already applied: dropped
    kDuplicate,  // the worker already pushed this step: dropped
    kAhead,      // for a step not reached yet: a bug of the sender's
  };
  // Adds `worker`'s push for `step` ([len(ids), dim] in `grad`; rows with
  // skip[i] set are left out, the push still counts) to the step in flight,
  // the variable being at `version` (step == version is the step in
  // flight).
  // REQUIRES: ids unique; grad.size() == ids.size() * dim; skip empty or of
  // len(ids).
  Add AddPush(int64_t version, int64_t step, int32_t worker, std::span<const int64_t> ids,
              std::span<const float> grad, const std::vector<bool>& skip);

  // Whether `quorum` pushes (at least one) are in.
  bool Ready(int quorum) const {
    return !contributors_.empty() && static_cast<int>(contributors_.size()) >= quorum;
  }
  // Whether some push is summed and not applied yet.
  bool pending() const { return !contributors_.empty(); }
  const std::vector<int32_t>& contributors() const { return contributors_; }

  // The step's mean, ids in ascending order (the same order whatever order
  // the pushes came in), and the aggregate emptied for the next step.
  struct Mean {
    std::vector<int64_t> ids;
    std::vector<float> grad;  // [len(ids), dim]
    int pushes = 0;           // the divisor
  };
  Mean TakeMean();

  // The sums as they are (ids in arrival order), for state transfer, and
  // back: Load(Export()) into an empty aggregate of the same dim makes it
  // equal to this one. Load's errors: InvalidArgument for sums that are not
  // dim floats per id, a repeated id or a repeated worker.
  struct Saved {
    std::vector<int64_t> ids;
    std::vector<float> sums;  // [len(ids), dim]
    std::vector<int32_t> contributors;
  };
  Saved Export() const;
  absl::Status Load(Saved saved);

 private:
  const int64_t dim_;
  // id -> its row in sums_.
  absl::flat_hash_map<int64_t, int64_t> index_;
  std::vector<int64_t> ids_;
  std::vector<float> sums_;
  std::vector<int32_t> contributors_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_ROW_AGGREGATE_H_
