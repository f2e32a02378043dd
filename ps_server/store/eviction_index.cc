#include "ps_server/store/eviction_index.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace pst::ps {

double EvictionIndex::KeyOf(const Entry& e) const {
  if (lfu()) return std::log2(e.count) + static_cast<double>(e.last) / policy_.lfu_half_life;
  return static_cast<double>(e.last);
}

int32_t EvictionIndex::Alloc(Stripe& s, int64_t id) {
  int32_t n = s.free;
  if (n != kNil) {
    s.free = s.nodes[n].next;
    s.nodes[n] = Node{};
  } else {
    n = static_cast<int32_t>(s.nodes.size());
    s.nodes.emplace_back();
  }
  s.nodes[n].id = id;
  return n;
}

void EvictionIndex::Place(int stripe, int32_t n) {
  Stripe& s = stripes_[stripe];
  Node& node = s.nodes[n];
  const Key key = {node.entry.key, node.id};
  if (lfu()) {
    s.order.insert(key);
  } else {
    // From the back, past the nodes that order after it: none when it is
    // the newest update, but for its push's other rows of higher ids.
    int32_t before = s.tail;
    while (before != kNil && key < Key{s.nodes[before].entry.key, s.nodes[before].id}) {
      before = s.nodes[before].prev;
    }
    const int32_t after = before == kNil ? s.head : s.nodes[before].next;
    node.prev = before;
    node.next = after;
    (before == kNil ? s.head : s.nodes[before].next) = n;
    (after == kNil ? s.tail : s.nodes[after].prev) = n;
  }
  if (key < Front(stripe)) SetFront(stripe, key);
}

void EvictionIndex::Unplace(int stripe, int32_t n) {
  Stripe& s = stripes_[stripe];
  Node& node = s.nodes[n];
  const Key key = {node.entry.key, node.id};
  if (lfu()) {
    s.order.erase(key);
  } else {
    (node.prev == kNil ? s.head : s.nodes[node.prev].next) = node.next;
    (node.next == kNil ? s.tail : s.nodes[node.next].prev) = node.prev;
    node.prev = node.next = kNil;
  }
  if (key == Front(stripe)) UpdateFront(stripe);
}

void EvictionIndex::Note(int stripe, int64_t id, int64_t t) {
  Stripe& s = stripes_[stripe];
  auto [it, made] = s.slots.try_emplace(id, kNil);
  if (made) {
    it->second = Alloc(s, id);
  } else {
    const Entry& e = s.nodes[it->second].entry;
    if (e.last == t && !lfu()) return;
    Unplace(stripe, it->second);
  }
  const int32_t n = it->second;
  Entry& e = s.nodes[n].entry;
  if (lfu()) {
    const double age = made ? 0.0 : static_cast<double>(t - e.last);
    e.count = (made ? 0.0 : e.count * std::exp2(-age / policy_.lfu_half_life)) + 1.0;
  }
  e.last = t;
  e.key = KeyOf(e);
  Place(stripe, n);
  // Only a new row can lower the earliest update (an update raises its
  // row's): a new row is updated at the newest version, so this rarely
  // writes.
  if (made && t < earliest_.load(std::memory_order_relaxed)) {
    earliest_.store(t, std::memory_order_relaxed);
  }
}

void EvictionIndex::Load(int stripe, int64_t id, Entry entry) {
  Stripe& s = stripes_[stripe];
  auto [it, made] = s.slots.try_emplace(id, kNil);
  if (made) {
    it->second = Alloc(s, id);
  } else {
    Unplace(stripe, it->second);
  }
  if (!(entry.count > 0)) entry.count = 1.0;
  entry.key = KeyOf(entry);
  s.nodes[it->second].entry = entry;
  Place(stripe, it->second);
  if (entry.last < earliest_.load(std::memory_order_relaxed)) {
    earliest_.store(entry.last, std::memory_order_relaxed);
  }
}

void EvictionIndex::Forget(int stripe, int64_t id) {
  Stripe& s = stripes_[stripe];
  auto it = s.slots.find(id);
  if (it == s.slots.end()) return;
  const int32_t n = it->second;
  s.slots.erase(it);
  Unplace(stripe, n);
  s.nodes[n].next = s.free;
  s.free = n;
}

void EvictionIndex::UpdateFront(int stripe) {
  const Stripe& s = stripes_[stripe];
  if (lfu()) {
    SetFront(stripe, s.order.empty() ? kNoKey : *s.order.begin());
  } else {
    SetFront(stripe, s.head == kNil ? kNoKey : Key{s.nodes[s.head].entry.key, s.nodes[s.head].id});
  }
}

const EvictionIndex::Entry* EvictionIndex::Find(int stripe, int64_t id) const {
  const Stripe& s = stripes_[stripe];
  auto it = s.slots.find(id);
  return it == s.slots.end() ? nullptr : &s.nodes[it->second].entry;
}

std::optional<int64_t> EvictionIndex::Victim(int* stripe) const {
  // The lowest key, in four independent chains (no branch, no dependence
  // on the index of the best so far)...
  double low[4] = {kNoKey.first, kNoKey.first, kNoKey.first, kNoKey.first};
  for (int i = 0; i < kStripes; i += 4) {
    for (int j = 0; j < 4; ++j) low[j] = front_keys_[i + j] < low[j] ? front_keys_[i + j] : low[j];
  }
  const double key = std::min(std::min(low[0], low[1]), std::min(low[2], low[3]));
  if (key == kNoKey.first) return std::nullopt;
  // ...then the lowest id of that key, the same way (lru's keys tie
  // often: a push updates rows of every stripe at one version). Keys are
  // compared by their bits (never NaN, never -0), which compiles to
  // conditional moves where == on doubles branches.
  const auto bits = std::bit_cast<uint64_t>(key);
  int64_t id[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
  for (int i = 0; i < kStripes; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const bool tie = std::bit_cast<uint64_t>(front_keys_[i + j]) == bits;
      const int64_t candidate = tie ? front_ids_[i + j] : INT64_MAX;
      id[j] = candidate < id[j] ? candidate : id[j];
    }
  }
  const int64_t victim = std::min(std::min(id[0], id[1]), std::min(id[2], id[3]));
  // ...and its stripe (an id is in one stripe only).
  int best = 0;
  while (front_ids_[best] != victim || std::bit_cast<uint64_t>(front_keys_[best]) != bits) ++best;
  *stripe = best;
  return victim;
}

void EvictionIndex::RecomputeEarliest() {
  int64_t earliest = INT64_MAX;
  // Keys are last updates (lru, ttl): each stripe's first row is its
  // earliest.
  for (double key : front_keys_) {
    if (key != kNoKey.first) earliest = std::min(earliest, static_cast<int64_t>(key));
  }
  earliest_.store(earliest, std::memory_order_relaxed);
}

}  // namespace pst::ps
