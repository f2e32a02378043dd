#include "ps_server/store/change_log.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace pst::ps {

void ChangeLog::Start() {
  Stop();
  on_ = true;
}

void ChangeLog::Stop() {
  Forget();
  on_ = false;
}

void ChangeLog::Forget() {
  intervals_.clear();
  pending_.clear();
  base_.clear();
  base_versions_.clear();
}

int64_t ChangeLog::Close(absl::flat_hash_map<std::string, HashRowTable::ChangedIds> tables,
                         Versions versions) {
  const int64_t seq = next_seq_++;
  intervals_.push_back({seq, std::move(tables)});
  pending_[seq] = std::move(versions);
  while (pending_.size() > kPendingSnapshots) pending_.erase(pending_.begin());
  return seq;
}

bool ChangeLog::IsBase(const std::string& base, const Versions& versions) const {
  if (base_.empty() || base != base_ || versions.size() != base_versions_.size()) return false;
  return std::all_of(versions.begin(), versions.end(),
                     [&](const auto& v) { return base_versions_.contains(v.first); });
}

int64_t ChangeLog::BaseVersion(const std::string& name) const {
  auto it = base_versions_.find(name);
  return it == base_versions_.end() ? -1 : it->second;
}

std::vector<int64_t> ChangeLog::ChangedSinceBase(const std::string& name) const {
  absl::flat_hash_set<int64_t> ids;
  for (const Interval& interval : intervals_) {
    auto it = interval.tables.find(name);
    if (it == interval.tables.end()) continue;
    for (const auto& stripe : it->second) ids.insert(stripe.begin(), stripe.end());
  }
  std::vector<int64_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

void ChangeLog::Written(int64_t seq, const std::string& name) {
  auto it = pending_.find(seq);
  if (it == pending_.end()) return;
  base_ = name;
  base_versions_ = std::move(it->second);
  pending_.erase(pending_.begin(), std::next(it));
  while (!intervals_.empty() && intervals_.front().seq <= seq) intervals_.pop_front();
}

}  // namespace pst::ps
