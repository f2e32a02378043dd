#include "ps_server/store/dense_snapshot.h"

#include <utility>

#include "absl/status/status.h"

namespace pst::ps {

bool CopyBudget::TryTake(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > left_) return false;
  left_ -= bytes;
  return true;
}

void CopyBudget::Give(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  left_ += bytes;
}

DenseSnapshotHold::DenseSnapshotHold(const std::vector<float>* values,
                                     const std::vector<std::vector<float>>* slots,
                                     std::shared_ptr<CopyBudget> budget)
    : values_(values), slots_(slots), budget_(std::move(budget)) {}

DenseSnapshotHold::~DenseSnapshotHold() {
  absl::MutexLock lock(&mu_);
  if (taken_ > 0 && budget_ != nullptr) budget_->Give(taken_);
}

absl::Status DenseSnapshotHold::Read(TensorsFn fn) const {
  absl::MutexLock lock(&mu_);
  if (read_ || (values_ == nullptr && !copied_)) {
    return absl::FailedPreconditionError("a snapshot's dense record was read already");
  }
  read_ = true;
  const std::vector<float>& values = copied_ ? copy_ : *values_;
  const std::vector<std::vector<float>>& slots = copied_ ? slot_copies_ : *slots_;
  std::vector<std::span<const float>> spans(slots.begin(), slots.end());
  absl::Status status = fn(values, spans);
  // The copies are no longer needed; the variable is free to change.
  ReleaseLocked();
  return status;
}

void DenseSnapshotHold::ReleaseLocked() const {
  values_ = nullptr;
  slots_ = nullptr;
  std::vector<float>().swap(copy_);
  std::vector<std::vector<float>>().swap(slot_copies_);
  if (taken_ > 0 && budget_ != nullptr) budget_->Give(taken_);
  taken_ = 0;
}

void DenseSnapshotHold::Preserve(bool force) {
  absl::MutexLock lock(&mu_);
  if (values_ == nullptr || read_) return;
  int64_t bytes = static_cast<int64_t>(values_->size() * sizeof(float));
  for (const std::vector<float>& slot : *slots_) {
    bytes += static_cast<int64_t>(slot.size() * sizeof(float));
  }
  if (force || budget_ == nullptr || budget_->TryTake(bytes)) {
    if (!force && budget_ != nullptr) taken_ = bytes;
    CopyLocked();
    return;
  }
  // No room: wait for the writer to read the variable as it is, but not
  // past kWaitForWriter (a snapshot kept for a WRITE that is late, or
  // never comes): then copy anyway, past the budget.
  const bool read = mu_.AwaitWithTimeout(
      absl::Condition(
          +[](DenseSnapshotHold* h) ABSL_SHARED_LOCKS_REQUIRED(h->mu_) { return h->read_; }, this),
      kWaitForWriter);
  if (read || values_ == nullptr) return;
  CopyLocked();
}

void DenseSnapshotHold::CopyLocked() {
  copy_ = *values_;
  slot_copies_ = *slots_;
  copied_ = true;
  values_ = nullptr;
  slots_ = nullptr;
}

void DenseSnapshotHold::Abandon() {
  absl::MutexLock lock(&mu_);
  read_ = true;
  ReleaseLocked();
}

}  // namespace pst::ps
