// One variable of a ps (or one partition of a logical variable) and every
// operation on it under its own locks: dense values and optimizer slots,
// the version, SYNC's accumulator, its hash rows (HashRowTable), ids routed
// to its local rows, row reads and row updates under striped row locks.
// VariableStore holds the variables by name and does what spans several of
// them (a request checked whole before any is changed, the training mode,
// snapshots).
//
// Kinds (VariableSpec.routing; see variable_store.h): a whole variable, a
// MOD or DIV partition of rows of a logical variable, or a HASH embedding
// whose rows are made on touch.
//
// Locks: `mu` guards the values, slots, accumulator and hash rows. Dense
// pushes take it exclusively (ApplyLocked: a reader sees a push before or
// after, never half of one). Row pushes (ApplyRows) take it shared plus the
// stripe of each row (one of kRowStripes, by row) exclusively, so pushes to
// different rows proceed in parallel, once `row_pushes_striped` is set: the
// first row push, and any that must make or count hash rows, take `mu`
// exclusively instead. A row is updated atomically, a row push is not: a
// concurrent ReadRows may see some of its rows updated and others not yet.
// ReadRows holds `mu` shared plus, row by row, the stripes' reader locks;
// whole reads (WholeReadLock) hold `mu` shared, or exclusively once row
// pushes are striped (holding all the stripes would be 65 locks at once).
//
// Lock order: VariableStore's mu_, then SyncLedger's mutex, then a
// Variable's mu, then one of its stripes at a time, or (to preserve its
// values for a snapshot) the snapshot's hold and then its copy budget
// (dense_snapshot.h). A Variable takes no other lock, and no path holds two
// Variables' mu at once.
#ifndef PST_PS_SERVER_STORE_VARIABLE_H_
#define PST_PS_SERVER_STORE_VARIABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor_util.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/dense_snapshot.h"
#include "ps_server/store/hash_row_table.h"
#include "ps_server/store/optimizer.h"

namespace pst::ps {

class Variable {
 public:
  static constexpr int kRowStripes = HashRowTable::kStripes;

  // A new variable of `spec` (checked by ValidateSpec), trained by
  // `optimizer` (the store's, which outlives it), with its slots; dense
  // values from `initial_values` (little-endian floats of the
  // right size, checked by CheckInitialValues) or else the initializer.
  // `limits` bounds a hash variable's rows (admit_after comes from spec).
  Variable(proto::VariableSpec spec, Optimizer& optimizer, HashRowTable::Limits limits,
           const std::string* initial_values = nullptr);
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;
  // A snapshot still holding the values (dense_snapshot.h) copies them.
  ~Variable();

  const proto::VariableSpec spec;
  // Its optimizer: the job's, or its group's (spec.optimizer).
  Optimizer& optimizer;
  const bool is_hash;
  const int64_t rows;  // shape[0]; 0 for a hash variable
  const int64_t dim;   // elements per row
  // `spec` with the logical variable's shape, to draw initial values.
  const proto::VariableSpec fill_spec;

  mutable absl::Mutex mu;
  std::vector<float> values ABSL_GUARDED_BY(mu);
  std::vector<std::vector<float>> slots ABSL_GUARDED_BY(mu);
  // Written under mu held exclusively, or by a striped row push (mu held
  // shared) with fetch_add; read under mu.
  std::atomic<int64_t> version{0};
  // Once set (under mu held exclusively, by the first row push), row pushes
  // may change rows while mu is held shared.
  bool row_pushes_striped ABSL_GUARDED_BY(mu) = false;
  // SYNC: the sum of this version's gradients so far, and who sent them.
  std::vector<float> accum ABSL_GUARDED_BY(mu);
  std::vector<int32_t> contributors ABSL_GUARDED_BY(mu);
  // Hash variables: their rows and admission (empty for the others).
  HashRowTable table ABSL_GUARDED_BY(mu);
  // Dense variables: the hold of the snapshot that has not read the values
  // and slots yet (dense_snapshot.h), if any. Every change of the values or
  // slots calls PreserveForSnapshotLocked() first.
  // (Bookkeeping, not state: a const snapshot sets it.)
  mutable std::weak_ptr<DenseSnapshotHold> snapshot_hold ABSL_GUARDED_BY(mu);
  // Lets the snapshot holding the values and slots (if any) copy them, or
  // read them first, before they change; `force`: copy whatever its budget.
  void PreserveForSnapshotLocked(bool force = false) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Rows a hash variable holds; read without mu (relaxed).
  int64_t hash_rows() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return table.size(); }
  // The table, for its figures (hash_row_table.h: evictions(), ...,
  // disk_writes()), which are read without mu (relaxed).
  const HashRowTable& table_unlocked() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return table; }

  // ---- Dense updates. The caller holds the store's mutex (shared).
  // Applies `grad` with the optimizer (all of it, or the rows not in
  // `skip`) and bumps the version.
  void ApplyLocked(std::span<const float> grad, const std::vector<bool>& skip)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // ApplyLocked of a finite payload of `dtype` (float32 or bf16), read
  // block by block without unpacking it first. With `value`, also packs the
  // updated values into it, in `value_dtype`, while they are still in cache.
  void ApplyPayloadLocked(common::PayloadParts payload, proto::DType dtype, proto::Tensor* value,
                          proto::DType value_dtype) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // SYNC: adds worker's gradient (`grad` when it was unpacked, with `skip`,
  // else `payload`, of `dtype`) to this version's sum, then applies the mean once
  // `quorum` have arrived. kStale for a step below the version, kDuplicate
  // when `worker` already sent one for it; neither adds anything.
  enum class SyncAdd { kAdded, kStale, kDuplicate };
  SyncAdd AddToAggregateLocked(int64_t step, int32_t worker, common::PayloadParts payload,
                               proto::DType dtype, const std::vector<float>& grad,
                               const std::vector<bool>& skip, int quorum)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // SYNC: applies the mean of the accumulated gradients once `quorum` have
  // arrived.
  void MaybeApplyAggregateLocked(int quorum) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Packs the values into `value` in `dtype` (float32 or bf16; unset:
  // float32), in a buffer from the payload pool.
  void PackValuesLocked(proto::Tensor* value, proto::DType dtype) const
      ABSL_SHARED_LOCKS_REQUIRED(mu);

  // ---- Rows.
  // Checks one RowIds against this variable (range, partition, repeats);
  // fills the local row of each id (hash: the id itself).
  // Errors: InvalidArgument naming the variable.
  absl::Status LocalRows(const proto::RowIds& ids, std::vector<int64_t>* local) const;
  // ResourceExhausted when making rows for the `ids` not stored yet would
  // take a hash variable past its row limit.
  absl::Status CheckRoom(const std::vector<int64_t>& ids) const ABSL_LOCKS_EXCLUDED(mu);
  // Copies rows `local` ([len(local), dim] into `out`) and returns the
  // version they were read at. A read stores no row: a hash id not stored
  // reads as its initial values (zeros while not admitted), and counts as a
  // touch.
  int64_t ReadRows(const std::vector<int64_t>& local, float* out) ABSL_LOCKS_EXCLUDED(mu);
  // Applies `grad` ([len(local), dim]) to rows `local` but those in `skip`
  // with the optimizer, lazily (untouched rows and slots stay; t is the
  // update count). Returns the new version; adds to `*dropped` the rows of
  // hash ids not admitted (counted as touches, not applied).
  int64_t ApplyRows(const std::vector<int64_t>& local, std::span<const float> grad,
                    const std::vector<bool>& skip, int64_t* dropped) ABSL_LOCKS_EXCLUDED(mu);
  // A hash table's rows of `ids` that memory holds, read while pushes go on
  // (a save's pre-copy, HashRowTable::BeginPrecopy): a batch at a time
  // under mu held shared, each row under its stripe's reader lock. Calls
  // `fn` on each (its row valid during the call); ids not stored are
  // passed over.
  using StoredRowFn = absl::FunctionRef<void(int64_t id, std::span<const float> row,
                                             const EvictionIndex::Entry* entry)>;
  void CopyStoredRows(const std::vector<int64_t>& ids, StoredRowFn fn) const
      ABSL_LOCKS_EXCLUDED(mu);

 private:
  int StripeOf(int64_t local) const;
  // Calls fn(i) for every i in [0, local.size()), grouped by the stripe of
  // local[i], holding that stripe's lock (exclusively when `write`).
  template <typename Fn>
  void ForEachRowByStripe(const std::vector<int64_t>& local, bool write, Fn fn) const
      ABSL_SHARED_LOCKS_REQUIRED(mu);
  // Applies one row's `grad` to it and its slots with the optimizer at
  // update count t: the hash row `hash_row` (its values, then each slot's),
  // or when null the dense row `local` of values and slots. `row_slots`:
  // scratch, one span per optimizer slot.
  void ApplyToRow(float* hash_row, int64_t local, std::span<const float> grad, const Step& step,
                  std::vector<std::span<float>>* row_slots) ABSL_SHARED_LOCKS_REQUIRED(mu);
  // ApplyRows while holding mu shared: false, with nothing applied, when it
  // needs mu exclusively (the first row push, or hash rows to make or
  // count).
  bool TryApplyRowsShared(const std::vector<int64_t>& local, std::span<const float> grad,
                          const std::vector<bool>& skip, int64_t* version) ABSL_LOCKS_EXCLUDED(mu);

  mutable std::array<absl::Mutex, kRowStripes> stripes_;
};

// Holds a variable for reading it whole: `mu` shared, or exclusively once
// row pushes may change rows under the shared lock (striped row pushes).
class ABSL_SCOPED_LOCKABLE WholeReadLock {
 public:
  explicit WholeReadLock(const Variable& var) ABSL_SHARED_LOCK_FUNCTION(var.mu)
      : mu_(&var.mu) {
    mu_->ReaderLock();
    if (!var.row_pushes_striped) return;
    // Row pushes change rows while holding the lock shared: exclude them.
    // The flag never goes back to false, so it still holds once relocked.
    mu_->ReaderUnlock();
    mu_->Lock();
    exclusive_ = true;
  }
  ~WholeReadLock() ABSL_UNLOCK_FUNCTION() {
    if (exclusive_) {
      mu_->Unlock();
    } else {
      mu_->ReaderUnlock();
    }
  }
  WholeReadLock(const WholeReadLock&) = delete;
  WholeReadLock& operator=(const WholeReadLock&) = delete;

 private:
  absl::Mutex* const mu_;
  bool exclusive_ = false;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_VARIABLE_H_
