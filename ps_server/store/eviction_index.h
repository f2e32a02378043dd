// Which rows of a bounded hash table (common/table_policy.h) go first: an
// order over the rows by the policy's key, kept per row stripe so that
// pushes to rows of different stripes note their updates in parallel.
//
// Keys, over the table's version t (one tick per update applied to it):
//   lru, ttl   the version of the row's last update;
//   lfu:H      log2(c) + t/H, with c the row's update count, each update's
//              weight halving every H versions: c decayed to the last
//              update, whose log2 grows by 1/H a version, so keys of rows
//              touched at different times compare as their counts decayed
//              to the same version would.
// The lowest key goes first; equal keys by id. Deterministic: two indexes
// fed the same updates in the same order pick the same rows, so that a
// backup, applying its primary's changes in order, evicts what it did.
//
// Thread-safety: thread-compatible, locked by the owner (HashRowTable's):
// Note and Forget of one stripe under that stripe's lock (or the whole
// table's); the others under the whole table's lock held exclusively.
// earliest_update() may be read without a lock.
#ifndef PST_PS_SERVER_STORE_EVICTION_INDEX_H_
#define PST_PS_SERVER_STORE_EVICTION_INDEX_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "common/table_policy.h"

namespace pst::ps {

class EvictionIndex {
 public:
  static constexpr int kStripes = 64;

  // What the index knows of one row.
  struct Entry {
    int64_t last = 0;   // version of its last update
    double count = 0;   // lfu: updates, decayed to `last`
    double key = 0;
  };

  explicit EvictionIndex(common::TablePolicy policy) : policy_(policy) {
    front_keys_.fill(kNoKey.first);
    front_ids_.fill(kNoKey.second);
  }
  EvictionIndex(const EvictionIndex&) = delete;
  EvictionIndex& operator=(const EvictionIndex&) = delete;

  const common::TablePolicy& policy() const { return policy_; }

  // Notes an update of row `id` (of stripe `stripe`) at version `t`.
  void Note(int stripe, int64_t id, int64_t t);
  // Sets what is known of `id` (state transfer); `entry.key` is recomputed.
  void Load(int stripe, int64_t id, Entry entry);
  // Forgets `id` (its row is gone).
  void Forget(int stripe, int64_t id);
  // What is known of `id`, or nullptr.
  const Entry* Find(int stripe, int64_t id) const;

  // The row to go first, over every stripe; nullopt when none is held.
  // Its stripe into `*stripe`.
  std::optional<int64_t> Victim(int* stripe) const;
  // A lower bound of the last update of every row (none: INT64_MAX), for
  // ttl's check that nothing is due (readable without a lock).
  int64_t earliest_update() const { return earliest_.load(std::memory_order_relaxed); }
  // Recomputes earliest_update() exactly, after rows went. For lru and ttl,
  // whose keys are the last updates (lfu's are not: its bound only falls).
  void RecomputeEarliest();

 private:
  using Key = std::pair<double, int64_t>;  // (key, id)
  static constexpr int32_t kNil = -1;

  // One row's entry and its links in its stripe's list (lru, ttl).
  struct Node {
    Entry entry;
    int64_t id = 0;
    int32_t prev = kNil;
    int32_t next = kNil;
  };
  // One stripe's rows: `slots` maps an id to its node, once (one hash per
  // Note). lru and ttl keep the nodes in a doubly linked list sorted by
  // (key, id): an update moves its row to the back in O(1), but for the
  // rows of the same version with higher ids, which it steps back over
  // (a push updates its rows at one version). lfu, whose keys do not only
  // grow, keeps them in `order` instead.
  struct Stripe {
    absl::flat_hash_map<int64_t, int32_t> slots;
    std::vector<Node> nodes;  // indexed by slot; free ones chained by next
    int32_t free = kNil;
    int32_t head = kNil, tail = kNil;  // lru, ttl
    absl::btree_set<Key> order;        // lfu
  };

  bool lfu() const { return policy_.eviction == common::TablePolicy::Eviction::kLfu; }
  double KeyOf(const Entry& e) const;
  // A node for `id` in `s` (unlinked; its entry zero).
  static int32_t Alloc(Stripe& s, int64_t id);
  // Puts node `n` of stripe `stripe` in its place by (entry.key, id), in
  // the list or the tree, and into the stripe's front when it goes first.
  void Place(int stripe, int32_t n);
  // Takes node `n` of stripe `stripe` out of its place, and the stripe's
  // front from the next node when it went first.
  void Unplace(int stripe, int32_t n);
  // Copies stripe `stripe`'s first key into the fronts.
  void UpdateFront(int stripe);
  void SetFront(int stripe, Key key) {
    front_keys_[stripe] = key.first;
    front_ids_[stripe] = key.second;
  }
  Key Front(int stripe) const { return {front_keys_[stripe], front_ids_[stripe]}; }

  const common::TablePolicy policy_;
  std::array<Stripe, kStripes> stripes_;
  // Each stripe's first key (kNoKey when empty), side by side: Victim reads
  // 64 of them from a few cache lines instead of 64 stripes, the keys apart
  // from the ids so that it finds the lowest key in one pass without
  // branches, then the lowest id of that key.
  static constexpr Key kNoKey = {std::numeric_limits<double>::infinity(), INT64_MAX};
  alignas(64) std::array<double, kStripes> front_keys_;
  alignas(64) std::array<int64_t, kStripes> front_ids_;
  std::atomic<int64_t> earliest_{INT64_MAX};
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_EVICTION_INDEX_H_
