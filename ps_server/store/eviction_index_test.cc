#include "ps_server/store/eviction_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ps_server/store/hash_row_table.h"

namespace pst::ps {
namespace {

common::TablePolicy Policy(const std::string& eviction) {
  return common::ParseTablePolicy(100, eviction, "test").value();
}

// Takes the victims one by one until the index is empty.
std::vector<int64_t> Drain(EvictionIndex& index) {
  std::vector<int64_t> order;
  int stripe = -1;
  while (std::optional<int64_t> v = index.Victim(&stripe)) {
    EXPECT_EQ(stripe, HashRowTable::StripeOf(*v));
    order.push_back(*v);
    index.Forget(stripe, *v);
  }
  return order;
}

void Note(EvictionIndex& index, int64_t id, int64_t t) {
  index.Note(HashRowTable::StripeOf(id), id, t);
}

TEST(EvictionIndexTest, Lru_LeastRecentlyUpdatedGoesFirst_TiesById) {
  EvictionIndex index(Policy("lru"));
  for (int64_t id : {50, 10, 40, 20, 30}) Note(index, id, id);  // updated at version = id
  Note(index, 10, 60);  // 10 is now the most recent
  Note(index, 99, 20);  // as old as 20: the lower id goes first
  EXPECT_EQ(Drain(index), (std::vector<int64_t>{20, 99, 30, 40, 50, 10}));
}

TEST(EvictionIndexTest, Lru_RowsOfOneVersion_GoByIdWhateverOrderTheyWereNotedIn) {
  EvictionIndex index(Policy("lru"));
  std::vector<int64_t> ids;
  for (int64_t id = 1; id <= 2000; ++id) ids.push_back(id * 7);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(3));
  for (int64_t id : ids) Note(index, id, 5);  // one push: every row at version 5
  Note(index, 7, 6);
  std::vector<int64_t> expected;
  for (int64_t id = 2; id <= 2000; ++id) expected.push_back(id * 7);
  expected.push_back(7);
  EXPECT_EQ(Drain(index), expected);
}

// lru and ttl keep each stripe's rows in a list: every victim is still the
// lowest (last update, id), also when updates come a version late (striped
// pushes racing), rows are loaded or forgotten.
TEST(EvictionIndexTest, LruAndTtl_VictimIsTheLowestLastUpdateThenId_UnderRandomChanges) {
  for (const std::string policy : {"lru", "ttl:5"}) {
    EvictionIndex index(Policy(policy));
    std::map<int64_t, int64_t> last;              // id -> version of its last update
    std::set<std::pair<int64_t, int64_t>> order;  // (last, id)
    std::mt19937_64 rng(11);
    for (int64_t step = 0; step < 20000; ++step) {
      const int64_t id = static_cast<int64_t>(rng() % 500);
      const int64_t t = step / 8 - static_cast<int64_t>(rng() % 3);  // some a little late
      const int stripe = HashRowTable::StripeOf(id);
      if (auto it = last.find(id); it != last.end()) order.erase({it->second, id});
      switch (rng() % 8) {
        case 0:
          index.Forget(stripe, id);
          last.erase(id);
          break;
        case 1: {  // a load: its key anywhere below the last update's
          const int64_t loaded = static_cast<int64_t>(rng() % static_cast<uint64_t>(step / 8 + 1));
          index.Load(stripe, id, {loaded, 1.0, 0.0});
          last[id] = loaded;
          break;
        }
        default:
          index.Note(stripe, id, t);
          last[id] = t;
      }
      if (auto it = last.find(id); it != last.end()) order.insert({it->second, id});
      int victim_stripe = -1;
      const std::optional<int64_t> victim = index.Victim(&victim_stripe);
      ASSERT_EQ(victim.has_value(), !order.empty()) << policy << " step " << step;
      if (victim.has_value()) {
        ASSERT_EQ(*victim, order.begin()->second) << policy << " step " << step;
        EXPECT_EQ(victim_stripe, HashRowTable::StripeOf(*victim));
        EXPECT_EQ(index.Find(victim_stripe, *victim)->last, order.begin()->first);
      }
    }
    std::vector<int64_t> rest;
    for (const auto& [t, id] : order) rest.push_back(id);
    EXPECT_EQ(Drain(index), rest) << policy;
  }
}

TEST(EvictionIndexTest, Lfu_FrequentRowsStay_UntilTheirCountsDecay) {
  EvictionIndex index(Policy("lfu:10"));
  // 1 is updated at versions 1..8, 2 once at 8, 3 once at 9.
  for (int64_t t = 1; t <= 8; ++t) Note(index, 1, t);
  Note(index, 2, 8);
  Note(index, 3, 9);
  int stripe;
  EXPECT_EQ(index.Victim(&stripe), 2);  // once, and the longest ago
  // Forty versions (four half-lives) later, 1's eight updates weigh about
  // half of one new update: a row updated once now outranks it.
  Note(index, 4, 49);
  EXPECT_EQ(Drain(index), (std::vector<int64_t>{2, 3, 1, 4}));
}

TEST(EvictionIndexTest, Lfu_CountsDecayByTheHalfLife) {
  EvictionIndex index(Policy("lfu:10"));
  Note(index, 7, 0);
  Note(index, 7, 10);  // the first update weighs 1/2 by now
  const EvictionIndex::Entry* e = index.Find(HashRowTable::StripeOf(7), 7);
  ASSERT_NE(e, nullptr);
  EXPECT_DOUBLE_EQ(e->count, 1.5);
  EXPECT_EQ(e->last, 10);
}

TEST(EvictionIndexTest, SameUpdatesInTheSameOrder_SameVictims) {
  EvictionIndex a(Policy("lfu:50")), b(Policy("lfu:50"));
  std::mt19937_64 rng(7);
  for (int64_t t = 0; t < 5000; ++t) {
    const int64_t id = static_cast<int64_t>(rng() % 300) * 7919;
    Note(a, id, t);
    Note(b, id, t);
  }
  const std::vector<int64_t> order = Drain(a);
  EXPECT_EQ(order.size(), 300u);
  EXPECT_EQ(order, Drain(b));
}

TEST(EvictionIndexTest, EarliestUpdate_IsALowerBound_ExactAfterRecompute) {
  EvictionIndex index(Policy("ttl:5"));
  EXPECT_EQ(index.earliest_update(), INT64_MAX);
  Note(index, 1, 3);
  Note(index, 2, 7);
  EXPECT_EQ(index.earliest_update(), 3);
  Note(index, 1, 9);
  EXPECT_EQ(index.earliest_update(), 3);  // a bound, not exact
  index.RecomputeEarliest();
  EXPECT_EQ(index.earliest_update(), 7);
  index.Forget(HashRowTable::StripeOf(2), 2);
  index.RecomputeEarliest();
  EXPECT_EQ(index.earliest_update(), 9);
}

TEST(EvictionIndexTest, Load_SetsWhatIsKnown_BadCountsBecomeOne) {
  EvictionIndex index(Policy("lfu:10"));
  index.Load(HashRowTable::StripeOf(5), 5, {4, 3.0, 0.0});
  index.Load(HashRowTable::StripeOf(6), 6, {4, -1.0, 0.0});
  const EvictionIndex::Entry* six = index.Find(HashRowTable::StripeOf(6), 6);
  ASSERT_NE(six, nullptr);
  EXPECT_EQ(six->count, 1.0);
  EXPECT_EQ(Drain(index), (std::vector<int64_t>{6, 5}));
}

TEST(EvictionIndexTest, NoteReturn_IsLoadThenNote_ForEveryPolicy) {
  for (const std::string policy : {"lru", "ttl:40", "lfu:30"}) {
    // Rows leave (Forget, their entries kept as a disk tier keeps them)
    // and come back at a later version, some at the version they left.
    EvictionIndex a(Policy(policy)), b(Policy(policy));
    std::map<int64_t, EvictionIndex::Entry> gone;
    std::mt19937_64 rng(11);
    for (int64_t t = 0; t < 4000; ++t) {
      const int64_t id = static_cast<int64_t>(rng() % 200) * 31;
      const int stripe = HashRowTable::StripeOf(id);
      auto left = gone.find(id);
      if (left != gone.end()) {
        a.Load(stripe, id, left->second);
        a.Note(stripe, id, t);
        b.NoteReturn(stripe, id, left->second, t);
        gone.erase(left);
      } else {
        Note(a, id, t);
        Note(b, id, t);
      }
      ASSERT_EQ(a.Find(stripe, id)->count, b.Find(stripe, id)->count) << policy;
      if (rng() % 3 == 0) {  // the first victim leaves
        int sa = -1, sb = -1;
        const std::optional<int64_t> va = a.Victim(&sa), vb = b.Victim(&sb);
        ASSERT_EQ(va, vb) << policy << " at version " << t;
        gone[*va] = *a.Find(sa, *va);
        a.Forget(sa, *va);
        b.Forget(sb, *vb);
      }
    }
    EXPECT_FALSE(gone.empty());
    EXPECT_EQ(Drain(a), Drain(b)) << policy;
  }
}

}  // namespace
}  // namespace pst::ps
