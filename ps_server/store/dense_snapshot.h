// A snapshot's dense variables without a copy of each: copy-on-write.
//
// At the snapshot's instant every dense variable gets a DenseSnapshotHold,
// the record's source (common::ShardDenseSource), which points at the
// variable's own values and slots. The writer reads them from there when it
// comes to the record. A variable that is about to change before that
// (a push, a restore, a resync, its removal) first calls Preserve(), under
// its own lock: the hold copies the values and slots as they still are, if
// the snapshot's CopyBudget has room for them, or else the change waits
// until the writer has read them (at most kWaitForWriter: then it copies
// past the budget, so that a snapshot whose write is late, or never comes,
// stalls nothing for long). So the ps holds about the budget in copies
// beside its variables (a snapshot that copied everything held twice its
// variables), and a push waits only once the budget is spent, and only for
// the writer to reach its variable.
//
// Correctness: while a hold is unread and not preserved, its variable's
// values and slots cannot change, since every change calls Preserve()
// first and Preserve() takes the hold's mutex, which Read() holds for the
// whole read. Read() therefore reads them without the variable's lock.
//
// Lock order: a Variable's mu, then a hold's mu_, then the budget's. The
// writer takes a hold's mu_ and no variable's.
#ifndef PST_PS_SERVER_STORE_DENSE_SNAPSHOT_H_
#define PST_PS_SERVER_STORE_DENSE_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_format.h"

namespace pst::ps {

// How many bytes of copies a snapshot's holds may make between them.
class CopyBudget {
 public:
  explicit CopyBudget(int64_t bytes) : left_(bytes) {}
  // Takes `bytes` if there is room for them.
  bool TryTake(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back bytes taken.
  void Give(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  int64_t left_ ABSL_GUARDED_BY(mu_);
};

// What a variable and its record share: the variable's tensors until it
// preserves them or the record reads them. The variable keeps a weak_ptr,
// the record's source (DenseSnapshotSource) the owning one.
class DenseSnapshotHold {
 public:
  using TensorsFn = common::ShardDenseSource::TensorsFn;

  // `values` and `slots` are the variable's own (alive until Preserve() or
  // Read(), whichever comes first).
  DenseSnapshotHold(const std::vector<float>* values, const std::vector<std::vector<float>>* slots,
                    std::shared_ptr<CopyBudget> budget);
  ~DenseSnapshotHold();

  // Reads the values and slots as of the snapshot: the copy, or the
  // variable's own; afterwards the variable is free to change.
  absl::Status Read(TensorsFn fn) const ABSL_LOCKS_EXCLUDED(mu_);
  // The record is gone unread (a failed write): nothing waits for it.
  void Abandon() ABSL_LOCKS_EXCLUDED(mu_);

  // How long a change waits for the writer once the budget is spent,
  // before it copies anyway.
  static constexpr absl::Duration kWaitForWriter = absl::Seconds(1);

  // Called by the variable, under its lock held exclusively, before its
  // values or slots change or go: copies them within the budget, or waits
  // until Read() is done (at most kWaitForWriter, then copies); `force`:
  // copies whatever the budget. Then returns, and the hold no longer looks
  // at the variable.
  void Preserve(bool force = false) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Drops the copies (and gives their bytes back) and the variable.
  void ReleaseLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the variable's tensors and lets it go.
  void CopyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Read() is const to its callers (a record's source) but ends the hold:
  // the state is mutable.
  mutable absl::Mutex mu_;
  // The variable's own tensors until it preserves or the writer reads.
  mutable const std::vector<float>* values_ ABSL_GUARDED_BY(mu_);
  mutable const std::vector<std::vector<float>>* slots_ ABSL_GUARDED_BY(mu_);
  // The copies, once preserved.
  mutable std::vector<float> copy_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::vector<float>> slot_copies_ ABSL_GUARDED_BY(mu_);
  bool copied_ ABSL_GUARDED_BY(mu_) = false;
  mutable bool read_ ABSL_GUARDED_BY(mu_) = false;  // or abandoned
  mutable int64_t taken_ ABSL_GUARDED_BY(mu_) = 0;  // budget bytes the copies hold
  const std::shared_ptr<CopyBudget> budget_;
};

// A dense record's source (ShardRecord::dense): reads its hold, and
// abandons it when dropped unread.
class DenseSnapshotSource final : public common::ShardDenseSource {
 public:
  explicit DenseSnapshotSource(std::shared_ptr<DenseSnapshotHold> hold) : hold_(std::move(hold)) {}
  ~DenseSnapshotSource() override { hold_->Abandon(); }
  absl::Status Read(TensorsFn fn) const override { return hold_->Read(fn); }

 private:
  const std::shared_ptr<DenseSnapshotHold> hold_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_DENSE_SNAPSHOT_H_
