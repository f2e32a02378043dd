#include "ps_server/store/eviction_index.h"

#include <cmath>

namespace pst::ps {

double EvictionIndex::KeyOf(const Entry& e) const {
  if (policy_.eviction == common::TablePolicy::Eviction::kLfu) {
    return std::log2(e.count) + static_cast<double>(e.last) / policy_.lfu_half_life;
  }
  return static_cast<double>(e.last);
}

void EvictionIndex::Note(int stripe, int64_t id, int64_t t) {
  Stripe& s = stripes_[stripe];
  auto [it, made] = s.entries.try_emplace(id);
  Entry& e = it->second;
  if (!made) {
    if (e.last == t && policy_.eviction != common::TablePolicy::Eviction::kLfu) return;
    s.order.erase({e.key, id});
  }
  if (policy_.eviction == common::TablePolicy::Eviction::kLfu) {
    const double age = made ? 0.0 : static_cast<double>(t - e.last);
    e.count = (made ? 0.0 : e.count * std::exp2(-age / policy_.lfu_half_life)) + 1.0;
  }
  e.last = t;
  e.key = KeyOf(e);
  s.order.insert({e.key, id});
  UpdateFront(stripe);
  // Only a new row can lower the earliest update (an update raises its
  // row's): a new row is updated at the newest version, so this rarely
  // writes.
  if (made && t < earliest_.load(std::memory_order_relaxed)) {
    earliest_.store(t, std::memory_order_relaxed);
  }
}

void EvictionIndex::Load(int stripe, int64_t id, Entry entry) {
  Stripe& s = stripes_[stripe];
  if (auto it = s.entries.find(id); it != s.entries.end()) s.order.erase({it->second.key, id});
  if (!(entry.count > 0)) entry.count = 1.0;
  entry.key = KeyOf(entry);
  s.entries[id] = entry;
  s.order.insert({entry.key, id});
  UpdateFront(stripe);
  if (entry.last < earliest_.load(std::memory_order_relaxed)) {
    earliest_.store(entry.last, std::memory_order_relaxed);
  }
}

void EvictionIndex::Forget(int stripe, int64_t id) {
  Stripe& s = stripes_[stripe];
  auto it = s.entries.find(id);
  if (it == s.entries.end()) return;
  s.order.erase({it->second.key, id});
  s.entries.erase(it);
  UpdateFront(stripe);
}

void EvictionIndex::UpdateFront(int stripe) {
  const Stripe& s = stripes_[stripe];
  fronts_[stripe] = s.order.empty() ? kNoKey : *s.order.begin();
}

const EvictionIndex::Entry* EvictionIndex::Find(int stripe, int64_t id) const {
  const Stripe& s = stripes_[stripe];
  auto it = s.entries.find(id);
  return it == s.entries.end() ? nullptr : &it->second;
}

std::optional<int64_t> EvictionIndex::Victim(int* stripe) const {
  int best = 0;
  for (int i = 1; i < kStripes; ++i) {
    if (fronts_[i] < fronts_[best]) best = i;
  }
  if (fronts_[best] == kNoKey) return std::nullopt;
  *stripe = best;
  return fronts_[best].second;
}

void EvictionIndex::RecomputeEarliest() {
  int64_t earliest = INT64_MAX;
  // Keys are last updates (lru, ttl): each stripe's first row is its
  // earliest.
  for (const Key& front : fronts_) {
    if (front != kNoKey) earliest = std::min(earliest, static_cast<int64_t>(front.first));
  }
  earliest_.store(earliest, std::memory_order_relaxed);
}

}  // namespace pst::ps
