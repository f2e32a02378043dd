#include "ps_server/store/hash_row_table.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ps_server/store/store_internal.h"

namespace pst::ps {

HashRowTable::HashRowTable(Limits limits, int64_t dim, std::vector<float> slot_initial_values,
                           RowInit init)
    : limits_(limits),
      dim_(dim),
      slot_initial_values_(std::move(slot_initial_values)),
      width_(dim * (1 + static_cast<int64_t>(slot_initial_values_.size()))),
      init_(std::move(init)),
      index_(limits_.policy.bounded() ? std::make_unique<EvictionIndex>(limits_.policy)
                                      : nullptr) {}

int HashRowTable::StripeOf(int64_t id) {
  // Hash ids can be anything; mixed, they spread over the stripes evenly.
  return static_cast<int>(store_internal::MixId(id) % kStripes);
}

int64_t HashRowTable::Capacity() const {
  const int64_t capacity = limits_.policy.capacity;
  return capacity > 0 ? std::min(capacity, limits_.max_rows) : limits_.max_rows;
}

void HashRowTable::Evict(int stripe, int64_t id) {
  index_->Forget(stripe, id);
  rows_.erase(id);
  size_.store(static_cast<int64_t>(rows_.size()), std::memory_order_relaxed);
  evictions_.fetch_add(1, std::memory_order_relaxed);
}

void HashRowTable::EvictBelow(int64_t room) {
  int stripe = 0;
  while (static_cast<int64_t>(rows_.size()) >= room) {
    std::optional<int64_t> victim = index_->Victim(&stripe);
    if (!victim.has_value()) return;
    Evict(stripe, *victim);
  }
}

bool HashRowTable::ExpiryDue(int64_t now) const {
  if (index_ == nullptr || limits_.policy.eviction != common::TablePolicy::Eviction::kTtl) {
    return false;
  }
  const int64_t earliest = index_->earliest_update();
  return earliest != INT64_MAX && earliest < now - limits_.policy.ttl;
}

void HashRowTable::Expire(int64_t now) {
  if (!ExpiryDue(now)) return;
  // ttl orders rows by their last update: the stale ones come first.
  int stripe = 0;
  for (std::optional<int64_t> victim = index_->Victim(&stripe); victim.has_value();
       victim = index_->Victim(&stripe)) {
    if (index_->Find(stripe, *victim)->last >= now - limits_.policy.ttl) break;
    Evict(stripe, *victim);
  }
  index_->RecomputeEarliest();
}

const float* HashRowTable::Find(int64_t id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : it->second.data();
}

float* HashRowTable::Find(int64_t id) {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : it->second.data();
}

bool HashRowTable::ContainsAll(std::span<const int64_t> ids) const {
  return std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return rows_.contains(id); });
}

bool HashRowTable::CountTouch(int64_t id) {
  const int32_t admit_after = limits_.admit_after;
  if (admit_after <= 1) return true;
  if (!admission_.has_value()) {
    // The size was checked where it was given; the default if it was not.
    absl::StatusOr<AdmissionFilter> made = AdmissionFilter::Create(limits_.admission_filter_bytes);
    admission_ = made.ok() ? *std::move(made)
                           : *AdmissionFilter::Create(AdmissionFilter::kDefaultBytes);
  }
  return admission_->Add(id) >= static_cast<uint32_t>(admit_after);
}

float* HashRowTable::Touch(int64_t id, int64_t t) {
  if (float* row = Find(id)) {
    NoteUpdate(id, t);
    return row;
  }
  if (!CountTouch(id)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  admissions_.fetch_add(1, std::memory_order_relaxed);
  if (index_ != nullptr && limits_.policy.capacity > 0) EvictBelow(Capacity());
  std::vector<float> row(static_cast<size_t>(width_));
  init_(id, std::span<float>(row.data(), static_cast<size_t>(dim_)));
  for (size_t s = 0; s < slot_initial_values_.size(); ++s) {
    std::fill_n(row.data() + (s + 1) * dim_, dim_, slot_initial_values_[s]);
  }
  float* data = rows_.emplace(id, std::move(row)).first->second.data();
  size_.fetch_add(1, std::memory_order_relaxed);
  NoteUpdate(id, t);
  return data;
}

absl::Status HashRowTable::CheckRoom(std::span<const int64_t> ids, const std::string& name) const {
  int64_t fresh = 0;
  for (int64_t id : ids) fresh += rows_.contains(id) ? 0 : 1;
  const int64_t held = size();
  if (index_ != nullptr && limits_.policy.capacity > 0) return absl::OkStatus();  // makes room
  if (fresh > 0 && held + fresh > limits_.max_rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hash embedding '", name, "' holds ", held, " rows and this push would add up to ", fresh,
        "; this ps keeps at most ", limits_.max_rows,
        " rows per table (--max_table_rows); nothing applied"));
  }
  return absl::OkStatus();
}

void HashRowTable::Replace(Rows rows, int64_t version) {
  rows_ = std::move(rows);
  size_.store(static_cast<int64_t>(rows_.size()));
  admission_.reset();
  if (index_ == nullptr) return;
  index_ = std::make_unique<EvictionIndex>(limits_.policy);
  for (const auto& [id, row] : rows_) index_->Note(StripeOf(id), id, version);
  if (limits_.policy.capacity > 0) EvictBelow(Capacity() + 1);
}

void HashRowTable::LoadRow(int64_t id, const char* bytes, const EvictionIndex::Entry& entry) {
  std::vector<float>& held = rows_[id];
  held.resize(static_cast<size_t>(width_));
  std::memcpy(held.data(), bytes, held.size() * sizeof(float));
  size_.store(static_cast<int64_t>(rows_.size()));
  if (index_ != nullptr) index_->Load(StripeOf(id), id, entry);
}

}  // namespace pst::ps
