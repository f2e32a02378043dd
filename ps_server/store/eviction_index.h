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

#include "absl/container/btree_map.h"
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
  // Notes an update at version `t` of a row that comes back (from disk)
  // with `before`, what was known of it when it left: Load(before) then
  // Note(t), in one move, so the row is placed once, at its new key (not
  // first where its old key would go, a walk through the runs since).
  void NoteReturn(int stripe, int64_t id, Entry before, int64_t t);
  // Sets what is known of `id` (state transfer); `entry.key` is recomputed.
  void Load(int stripe, int64_t id, Entry entry);
  // Forgets `id` (its row is gone).
  void Forget(int stripe, int64_t id);
  // What is known of `id`, or nullptr.
  const Entry* Find(int stripe, int64_t id) const;

  // The row to go first, over every stripe; nullopt when none is held.
  // Its stripe into `*stripe`. REQUIRES: the owner's lock held
  // exclusively, const as it is (it brings a cache up to date).
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
    int32_t run = kNil;  // its run (lru, ttl)
  };
  // The nodes of one key in a stripe's list (lru, ttl), first to last;
  // `sorted` when they are in order of id.
  struct Run {
    double key = 0;
    int32_t first = kNil;
    int32_t last = kNil;
    bool sorted = true;
  };
  // One stripe's rows: `slots` maps an id to its node, once (one hash per
  // Note). lru and ttl keep the nodes in a doubly linked list in order of
  // key, in runs of one key each: a node goes to the end of its key's run,
  // nearly always the last run or a new one after it (a push updates its
  // rows at one version), in O(1); a key below the last run's (a load, in
  // any order, or a row back from disk) finds its run in `run_at`, in
  // O(log runs), not by a walk through the runs after it. A run is
  // put in order of id, the ties' order, only once it is first (its first
  // node the stripe's front); its nodes come out of it in O(1) meanwhile.
  // lfu, whose keys do not only grow, keeps them in `order` instead.
  struct Stripe {
    absl::flat_hash_map<int64_t, int32_t> slots;
    std::vector<Node> nodes;  // indexed by slot; free ones chained by next
    int32_t free = kNil;
    int32_t head = kNil, tail = kNil;  // lru, ttl
    std::vector<Run> runs;             // indexed by run; free ones chained by first
    int32_t free_run = kNil;
    absl::btree_map<double, int32_t> run_at;  // each live run by its key
    std::vector<std::pair<int64_t, int32_t>> scratch;  // SortRun's
    absl::btree_set<Key> order;                        // lfu
  };

  bool lfu() const { return policy_.eviction == common::TablePolicy::Eviction::kLfu; }
  // Node `n`'s entry updated at version `t` (`fresh`: its first update),
  // placed at its key. REQUIRES: `n` unplaced.
  void Update(int stripe, int32_t n, bool fresh, int64_t t);
  // `id`'s node (made if new, else taken out of its place) holding `entry`
  // (a count <= 0 made 1, the key recomputed), not placed yet.
  int32_t SetUnplaced(int stripe, int64_t id, Entry entry);
  double KeyOf(const Entry& e) const;
  // A node for `id` in `s` (unlinked; its entry zero).
  static int32_t Alloc(Stripe& s, int64_t id);
  // Puts node `n` of stripe `stripe` in its place by (entry.key, id), in
  // the list or the tree, and into the stripe's front when it goes first.
  void Place(int stripe, int32_t n);
  // Takes node `n` of stripe `stripe` out of its place, and the stripe's
  // front from the next node when it went first.
  void Unplace(int stripe, int32_t n);
  // Copies stripe `stripe`'s first key into the fronts (lru, ttl: putting
  // the first run in order).
  void UpdateFront(int stripe);
  // Links node `n` of `s` into the list after node `before` (kNil: first).
  static void LinkAfter(Stripe& s, int32_t before, int32_t n);
  // Puts run `r` of `s` in order of id.
  static void SortRun(Stripe& s, int32_t r);
  void SetFront(int stripe, Key key) {
    front_keys_[stripe] = key.first;
    front_ids_[stripe] = key.second;
    changed_.fetch_or(uint64_t{1} << stripe, std::memory_order_relaxed);
  }
  Key Front(int stripe) const { return {front_keys_[stripe], front_ids_[stripe]}; }

  const common::TablePolicy policy_;
  std::array<Stripe, kStripes> stripes_;
  // Each stripe's first key (kNoKey when empty), side by side.
  static constexpr Key kNoKey = {std::numeric_limits<double>::infinity(), INT64_MAX};
  alignas(64) std::array<double, kStripes> front_keys_;
  alignas(64) std::array<int64_t, kStripes> front_ids_;
  // Victim's tournament over the fronts: winners_[n] (n in 1..kStripes-1)
  // is the stripe whose front goes first of those under node n, whose
  // children are 2n and 2n+1, node kStripes + s standing for stripe s;
  // winners_[1] goes first of all. Victim replays the matches on the paths
  // of the stripes whose fronts changed since (changed_, one bit each; set
  // by SetFront, under a stripe's lock only, hence atomic): a victim costs
  // log2(kStripes) matches, not kStripes. Victim runs under the owner's
  // lock held exclusively, so its own writes need none.
  static_assert(kStripes <= 64 && (kStripes & (kStripes - 1)) == 0,
                "one bit per stripe, a full tree");
  mutable std::array<uint8_t, kStripes> winners_{};
  mutable std::atomic<uint64_t> changed_{~uint64_t{0}};
  std::atomic<int64_t> earliest_{INT64_MAX};
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_EVICTION_INDEX_H_
