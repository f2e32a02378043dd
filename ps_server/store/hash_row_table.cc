#include "ps_server/store/hash_row_table.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ps_server/store/store_internal.h"

namespace pst::ps {

HashRowTable::HashRowTable(Limits limits, int64_t dim, std::vector<float> slot_initial_values,
                           RowInit init)
    : limits_(limits),
      dim_(dim),
      slot_initial_values_(std::move(slot_initial_values)),
      width_(dim * (1 + static_cast<int64_t>(slot_initial_values_.size()))),
      init_(std::move(init)) {}

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

uint32_t& HashRowTable::SharedCounter(int64_t id) {
  return overflow_counts_[store_internal::MixId(id) % overflow_counts_.size()];
}

bool HashRowTable::CountTouch(int64_t id, bool admit) {
  const int32_t admit_after = limits_.admit_after;
  if (admit_after <= 1) return true;
  int64_t count;
  auto pending = pending_.find(id);
  uint32_t* shared = nullptr;
  if (pending == pending_.end() && !overflow_counts_.empty()) {
    // An id once counted in the shared counters keeps counting there
    // (they never decrease), even after the exact map has room again.
    shared = &SharedCounter(id);
    if (*shared == 0) shared = nullptr;
  }
  if (pending != pending_.end()) {
    count = ++pending->second;
  } else if (shared == nullptr && static_cast<int64_t>(pending_.size()) < limits_.max_pending) {
    pending_.emplace(id, 1);
    count = 1;
  } else {
    // The exact map is full: count in shared, saturating counters.
    if (overflow_counts_.empty()) {
      overflow_counts_.assign(std::max<int64_t>(1, limits_.overflow_counters), 0);
    }
    uint32_t& c = SharedCounter(id);
    if (c < std::numeric_limits<uint32_t>::max()) ++c;
    count = c;
  }
  if (count < admit_after) return false;
  if (admit) pending_.erase(id);
  return true;
}

float* HashRowTable::Touch(int64_t id) {
  if (float* row = Find(id)) return row;
  if (!CountTouch(id, /*admit=*/true)) return nullptr;
  std::vector<float> row(static_cast<size_t>(width_));
  init_(id, std::span<float>(row.data(), static_cast<size_t>(dim_)));
  for (size_t s = 0; s < slot_initial_values_.size(); ++s) {
    std::fill_n(row.data() + (s + 1) * dim_, dim_, slot_initial_values_[s]);
  }
  float* data = rows_.emplace(id, std::move(row)).first->second.data();
  size_.fetch_add(1, std::memory_order_relaxed);
  return data;
}

absl::Status HashRowTable::CheckRoom(std::span<const int64_t> ids, const std::string& name) const {
  int64_t fresh = 0;
  for (int64_t id : ids) fresh += rows_.contains(id) ? 0 : 1;
  const int64_t held = size();
  if (fresh > 0 && held + fresh > limits_.max_rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hash embedding '", name, "' holds ", held, " rows and this push would add up to ", fresh,
        "; this ps keeps at most ", limits_.max_rows,
        " rows per table (--max_table_rows); nothing applied"));
  }
  return absl::OkStatus();
}

void HashRowTable::Replace(Rows rows) {
  rows_ = std::move(rows);
  size_.store(static_cast<int64_t>(rows_.size()));
  pending_.clear();
}

void HashRowTable::LoadRow(int64_t id, const char* bytes) {
  std::vector<float>& held = rows_[id];
  held.resize(static_cast<size_t>(width_));
  std::memcpy(held.data(), bytes, held.size() * sizeof(float));
  size_.store(static_cast<int64_t>(rows_.size()));
}

}  // namespace pst::ps
