#include "ps_server/store/eviction_index.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>

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

void EvictionIndex::LinkAfter(Stripe& s, int32_t before, int32_t n) {
  Node& node = s.nodes[n];
  const int32_t after = before == kNil ? s.head : s.nodes[before].next;
  node.prev = before;
  node.next = after;
  (before == kNil ? s.head : s.nodes[before].next) = n;
  (after == kNil ? s.tail : s.nodes[after].prev) = n;
}

void EvictionIndex::Place(int stripe, int32_t n) {
  Stripe& s = stripes_[stripe];
  Node& node = s.nodes[n];
  const Key key = {node.entry.key, node.id};
  if (lfu()) {
    s.order.insert(key);
  } else {
    // The last run of a key not above this one: the last run, but for an
    // update that came late (striped pushes racing) or a load.
    int32_t r = s.tail == kNil ? kNil : s.nodes[s.tail].run;
    const bool at_end = r == kNil || s.runs[r].key <= key.first;
    if (!at_end) {
      auto above = s.run_at.upper_bound(key.first);
      r = above == s.run_at.begin() ? kNil : std::prev(above)->second;
    }
    if (r != kNil && s.runs[r].key == key.first) {
      Run& run = s.runs[r];
      if (run.sorted && s.nodes[run.last].id > node.id) run.sorted = false;
      LinkAfter(s, run.last, n);
      run.last = n;
      node.run = r;
    } else {
      const int32_t before = r == kNil ? kNil : s.runs[r].last;
      int32_t fresh = s.free_run;
      if (fresh != kNil) {
        s.free_run = s.runs[fresh].first;
      } else {
        fresh = static_cast<int32_t>(s.runs.size());
        s.runs.emplace_back();
      }
      s.runs[fresh] = Run{key.first, n, n, true};
      if (at_end) {
        s.run_at.emplace_hint(s.run_at.end(), key.first, fresh);
      } else {
        s.run_at.emplace(key.first, fresh);
      }
      LinkAfter(s, before, n);
      node.run = fresh;
    }
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
    Run& run = s.runs[node.run];
    if (run.first == n && run.last == n) {
      s.run_at.erase(run.key);
      run.first = s.free_run;
      s.free_run = node.run;
    } else if (run.first == n) {
      run.first = node.next;
    } else if (run.last == n) {
      run.last = node.prev;
    }
    (node.prev == kNil ? s.head : s.nodes[node.prev].next) = node.next;
    (node.next == kNil ? s.tail : s.nodes[node.next].prev) = node.prev;
    node.prev = node.next = node.run = kNil;
  }
  if (key == Front(stripe)) UpdateFront(stripe);
}

void EvictionIndex::SortRun(Stripe& s, int32_t r) {
  Run& run = s.runs[r];
  // (id, node) side by side, so that sorting reads no node.
  std::vector<std::pair<int64_t, int32_t>>& members = s.scratch;
  members.clear();
  for (int32_t n = run.first;; n = s.nodes[n].next) {
    members.emplace_back(s.nodes[n].id, n);
    if (n == run.last) break;
  }
  std::sort(members.begin(), members.end());
  // Relinks the run's nodes in that order between its neighbours.
  int32_t before = s.nodes[run.first].prev;
  const int32_t after = s.nodes[run.last].next;
  for (const auto& [id, n] : members) {
    s.nodes[n].prev = before;
    (before == kNil ? s.head : s.nodes[before].next) = n;
    before = n;
  }
  s.nodes[before].next = after;
  (after == kNil ? s.tail : s.nodes[after].prev) = before;
  run.first = members.front().second;
  run.last = members.back().second;
  run.sorted = true;
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
  Update(stripe, it->second, made, t);
}

void EvictionIndex::Update(int stripe, int32_t n, bool fresh, int64_t t) {
  Entry& e = stripes_[stripe].nodes[n].entry;
  if (lfu()) {
    const double age = fresh ? 0.0 : static_cast<double>(t - e.last);
    e.count = (fresh ? 0.0 : e.count * std::exp2(-age / policy_.lfu_half_life)) + 1.0;
  }
  e.last = t;
  e.key = KeyOf(e);
  Place(stripe, n);
  // Only a new row can lower the earliest update (an update raises its
  // row's): a new row is updated at the newest version, so this rarely
  // writes.
  if (t < earliest_.load(std::memory_order_relaxed)) {
    earliest_.store(t, std::memory_order_relaxed);
  }
}

int32_t EvictionIndex::SetUnplaced(int stripe, int64_t id, Entry entry) {
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
  return it->second;
}

void EvictionIndex::NoteReturn(int stripe, int64_t id, Entry before, int64_t t) {
  const int32_t n = SetUnplaced(stripe, id, before);
  if (before.last == t && !lfu()) {  // as Note: no change of key
    Place(stripe, n);
    return;
  }
  Update(stripe, n, /*fresh=*/false, t);
}

void EvictionIndex::Load(int stripe, int64_t id, Entry entry) {
  Place(stripe, SetUnplaced(stripe, id, entry));
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
  Stripe& s = stripes_[stripe];
  if (lfu()) {
    SetFront(stripe, s.order.empty() ? kNoKey : *s.order.begin());
    return;
  }
  if (s.head == kNil) {
    SetFront(stripe, kNoKey);
    return;
  }
  const int32_t r = s.nodes[s.head].run;
  if (!s.runs[r].sorted) SortRun(s, r);
  SetFront(stripe, {s.runs[r].key, s.nodes[s.runs[r].first].id});
}

const EvictionIndex::Entry* EvictionIndex::Find(int stripe, int64_t id) const {
  const Stripe& s = stripes_[stripe];
  auto it = s.slots.find(id);
  return it == s.slots.end() ? nullptr : &s.nodes[it->second].entry;
}

std::optional<int64_t> EvictionIndex::Victim(int* stripe) const {
  // The stripe of node n's winner (n >= kStripes: the leaf of a stripe).
  auto winner = [&](int n) { return n >= kStripes ? n - kStripes : int{winners_[n]}; };
  auto play = [&](int n) {
    const int a = winner(2 * n), b = winner(2 * n + 1);
    winners_[n] = static_cast<uint8_t>(Front(b) < Front(a) ? b : a);
  };
  uint64_t changed = changed_.exchange(0, std::memory_order_relaxed);
  if (std::popcount(changed) > kStripes / 8) {
    for (int n = kStripes - 1; n >= 1; --n) play(n);
  } else {
    for (; changed != 0; changed &= changed - 1) {
      for (int n = (kStripes + std::countr_zero(changed)) / 2; n >= 1; n /= 2) play(n);
    }
  }
  const int best = winners_[1];
  if (Front(best) == kNoKey) return std::nullopt;
  *stripe = best;
  return front_ids_[best];
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
