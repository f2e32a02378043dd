// AdmissionFilter (admission_filter.h) on its own: its geometry and lazy
// allocation, estimates never below the true count, exact while ids are
// few, saturation, the count-min bound, and its byte form (a round trip,
// the same bytes from the same touches, refusal of corrupt blobs). Every
// stream is drawn from a fixed seed: the same on every run.
#include "ps_server/store/admission_filter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace pst::ps {
namespace {

AdmissionFilter MakeFilter(int64_t bytes, int depth = AdmissionFilter::kDefaultDepth) {
  absl::StatusOr<AdmissionFilter> filter = AdmissionFilter::Create(bytes, depth);
  EXPECT_TRUE(filter.ok()) << filter.status();
  return *std::move(filter);
}

// `touches` ids drawn uniformly from `distinct` random 64-bit ids.
std::vector<int64_t> RandomStream(int64_t touches, int64_t distinct, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(distinct));
  for (int64_t& id : ids) id = static_cast<int64_t>(rng());
  std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
  std::vector<int64_t> stream(static_cast<size_t>(touches));
  for (int64_t& id : stream) id = ids[pick(rng)];
  return stream;
}

TEST(AdmissionFilterTest, Create_SplitsTheBudgetIntoDepthRows) {
  AdmissionFilter filter = MakeFilter(int64_t{1} << 20, 4);
  EXPECT_EQ(filter.depth(), 4);
  EXPECT_EQ(filter.width(), int64_t{1} << 17);
  EXPECT_EQ(filter.door_bytes(), int64_t{1} << 17);
  AdmissionFilter odd = MakeFilter(10'001, 3);  // rows of 3333 bytes
  EXPECT_EQ(odd.door_bytes(), 1666);
  EXPECT_EQ(odd.width(), 1667);
  EXPECT_TRUE(AdmissionFilter::Create(AdmissionFilter::kDefaultBytes).ok());
}

TEST(AdmissionFilterTest, Create_BudgetOutOfRange_IsInvalidArgumentNamingTheFlag) {
  for (int64_t bytes : {int64_t{-1}, int64_t{0}, int64_t{8191}, AdmissionFilter::kMaxBytes + 1}) {
    absl::StatusOr<AdmissionFilter> filter = AdmissionFilter::Create(bytes, 4);
    ASSERT_FALSE(filter.ok()) << bytes;
    EXPECT_EQ(filter.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(filter.status().message().find("--admission_filter_bytes"), std::string::npos)
        << filter.status();
  }
  EXPECT_TRUE(AdmissionFilter::Create(8192, 4).ok());  // kMinWidth counters and bytes a row
}

TEST(AdmissionFilterTest, Create_DepthOutOfRange_IsInvalidArgument) {
  for (int depth : {-1, 0, AdmissionFilter::kMaxDepth + 1}) {
    EXPECT_EQ(AdmissionFilter::Create(int64_t{1} << 20, depth).status().code(),
              absl::StatusCode::kInvalidArgument)
        << depth;
  }
}

TEST(AdmissionFilterTest, CheckAdmitAfter_AboveTheCounterMax_IsInvalidArgument) {
  for (int32_t a : {-1, 0, 1, 2, 255}) {
    EXPECT_TRUE(AdmissionFilter::CheckAdmitAfter(a, "emb").ok()) << a;
  }
  absl::Status s = AdmissionFilter::CheckAdmitAfter(256, "emb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'emb'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("255"), std::string::npos) << s;
}

TEST(AdmissionFilterTest, NewFilter_HoldsNoCounters_UntilTheFirstAdd) {
  AdmissionFilter filter = MakeFilter(int64_t{1} << 20);
  EXPECT_FALSE(filter.allocated());
  EXPECT_EQ(filter.bytes(), 0);
  EXPECT_EQ(filter.Estimate(42), 0u);
  EXPECT_FALSE(filter.allocated());  // a read allocates nothing
  EXPECT_EQ(filter.Add(42), 1u);
  EXPECT_TRUE(filter.allocated());
  EXPECT_EQ(filter.bytes(), int64_t{1} << 20);
  EXPECT_EQ(filter.Estimate(42), 1u);

  filter.Clear();
  EXPECT_FALSE(filter.allocated());
  EXPECT_EQ(filter.bytes(), 0);
  EXPECT_EQ(filter.Estimate(42), 0u);
  EXPECT_EQ(filter.width(), int64_t{1} << 17);  // the geometry stays
}

TEST(AdmissionFilterTest, Add_CrowdedFilter_NeverUnderCounts) {
  // 20000 ids in rows of 1024 counters and 8192 bits: all are shared.
  AdmissionFilter filter = MakeFilter(8192, 4);
  absl::flat_hash_map<int64_t, uint32_t> truth;
  for (int64_t id : RandomStream(100'000, 20'000, 7)) {
    const uint32_t count = ++truth[id];
    const uint32_t estimate = filter.Add(id);
    ASSERT_GE(estimate, std::min(count, AdmissionFilter::kMaxCount)) << id;
    ASSERT_LE(estimate, AdmissionFilter::kMaxCount);
    // A first touch the doorkeeper proves first counts exactly 1; Estimate
    // reads the shared counters too.
    ASSERT_GE(filter.Estimate(id), estimate);
  }
  for (const auto& [id, count] : truth) {
    ASSERT_GE(filter.Estimate(id), std::min(count, AdmissionFilter::kMaxCount)) << id;
  }
}

TEST(AdmissionFilterTest, Add_FewDistinctIds_EstimatesAreExact) {
  // 200 ids in rows of 2^15 counters and 2^18 bits: no id shares all 4
  // of its bits or of its counters.
  AdmissionFilter filter = MakeFilter(int64_t{1} << 18, 4);
  absl::flat_hash_map<int64_t, uint32_t> truth;
  for (int64_t id : RandomStream(20'000, 200, 11)) {
    const uint32_t count = ++truth[id];
    ASSERT_EQ(filter.Add(id), count) << id;
  }
  // Small consecutive ids too (the common case for hashed features).
  for (int64_t id = 1'000'000; id < 1'000'200; ++id) {
    for (int i = 0; i < 3; ++i) filter.Add(id);
  }
  for (const auto& [id, count] : truth) EXPECT_EQ(filter.Estimate(id), count) << id;
  for (int64_t id = 1'000'000; id < 1'000'200; ++id) EXPECT_EQ(filter.Estimate(id), 3u) << id;
  EXPECT_EQ(filter.Estimate(-5), 0u);
}

TEST(AdmissionFilterTest, Add_PastTheCounterMax_Saturates) {
  AdmissionFilter filter = MakeFilter(int64_t{1} << 16);
  for (uint32_t i = 1; i <= AdmissionFilter::kMaxCount; ++i) ASSERT_EQ(filter.Add(9), i);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(filter.Add(9), AdmissionFilter::kMaxCount);
  EXPECT_EQ(filter.Estimate(9), AdmissionFilter::kMaxCount);
  EXPECT_EQ(filter.Estimate(10), 0u);  // its neighbours are untouched
  EXPECT_EQ(filter.Add(10), 1u);
}

TEST(AdmissionFilterTest, Add_ZipfLikeStream_OverestimatesWithinTheCountMinBound) {
  // Count-min: P(estimate > true + e * N / width) <= e^-depth per id. A
  // skewed stream (id k drawn with weight 1/k) into a small filter.
  constexpr int kDepth = 4;
  constexpr int64_t kWidth = 1024;
  AdmissionFilter filter = MakeFilter(2 * kDepth * kWidth, kDepth);
  std::mt19937_64 rng(3);
  std::vector<double> weights(50'000);
  for (size_t k = 0; k < weights.size(); ++k) weights[k] = 1.0 / static_cast<double>(k + 1);
  std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
  constexpr int64_t kTouches = 200'000;
  absl::flat_hash_map<int64_t, int64_t> truth;
  for (int64_t i = 0; i < kTouches; ++i) {
    const int64_t id = pick(rng) * 7919 + 13;  // ids spread out, as after hashing
    ++truth[id];
    filter.Add(id);
  }
  // +1: the doorkeeper's share (a first touch counted by shared bits).
  const double slack = 1 + std::exp(1.0) * static_cast<double>(kTouches) / kWidth;  // ~532
  int64_t over = 0;
  for (const auto& [id, count] : truth) {
    const int64_t estimate = filter.Estimate(id);
    if (count >= AdmissionFilter::kMaxCount) continue;  // saturated: no bound to check
    ASSERT_GE(estimate, count);
    if (static_cast<double>(estimate - count) > slack) ++over;
  }
  const double rate = static_cast<double>(over) / static_cast<double>(truth.size());
  const double bound = std::exp(-static_cast<double>(kDepth));  // ~0.0183
  EXPECT_LT(rate, bound / 4) << over << " of " << truth.size() << " ids";

  // The bound that matters for admission: ids touched once whose estimate
  // already says 2 or more (a false admission at admit_after = 2).
  int64_t once = 0, early = 0;
  for (const auto& [id, count] : truth) {
    if (count != 1) continue;
    ++once;
    early += filter.Estimate(id) >= 2 ? 1 : 0;
  }
  // Crowded on purpose (50000 ids in 1024 counters a row): most say >= 2;
  // the point is only that this is measured, not that it is small.
  EXPECT_GT(once, 0);
  EXPECT_LE(early, once);
}

TEST(AdmissionFilterTest, SameStream_TwoFilters_SerializeIdentically) {
  const std::vector<int64_t> stream = RandomStream(50'000, 5'000, 5);
  AdmissionFilter a = MakeFilter(int64_t{1} << 14, 4);
  AdmissionFilter b = MakeFilter(int64_t{1} << 14, 4);
  for (int64_t id : stream) a.Add(id);
  for (int64_t id : stream) b.Add(id);
  EXPECT_EQ(a.Serialize(), b.Serialize());
}

TEST(AdmissionFilterTest, Hashes_AreFixed_TheSameBytesOnEveryMachineAndRun) {
  // A pin on the id -> counter mapping: a backup ps (another process,
  // maybe another build) must reach the same bytes from the same touches.
  // If this changes, old checkpoints' filters no longer mean what they say.
  AdmissionFilter filter = MakeFilter(8192, 4);
  for (int64_t id = 0; id < 3000; ++id) {
    for (int64_t t = 0; t <= id % 3; ++t) filter.Add(id * 1'000'003 - 1'500'000'000);
  }
  const std::string blob = filter.Serialize();
  uint64_t fingerprint = 1469598103934665603ULL;  // FNV-1a 64
  for (char c : blob) fingerprint = (fingerprint ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  EXPECT_EQ(fingerprint, 1272136751206377887ULL) << "fingerprint " << fingerprint;
}

TEST(AdmissionFilterTest, SerializeDeserialize_RoundTrip_IsBitExact) {
  const std::vector<int64_t> stream = RandomStream(30'000, 3'000, 9);
  AdmissionFilter filter = MakeFilter(12'000, 3);
  for (int64_t id : stream) filter.Add(id);
  const std::string blob = filter.Serialize();
  EXPECT_EQ(blob.size(), AdmissionFilter::kHeaderBytes + 12'000 + AdmissionFilter::kTrailerBytes);
  EXPECT_EQ(blob.substr(0, 4), "PSAF");

  absl::StatusOr<AdmissionFilter> loaded = AdmissionFilter::Deserialize(blob);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->depth(), 3);
  EXPECT_EQ(loaded->width(), 2000);
  EXPECT_EQ(loaded->door_bytes(), 2000);
  EXPECT_EQ(loaded->bytes(), filter.bytes());
  EXPECT_EQ(loaded->Serialize(), blob);
  for (int64_t id : stream) ASSERT_EQ(loaded->Estimate(id), filter.Estimate(id)) << id;
  // And they go on the same way.
  for (int64_t id : RandomStream(1'000, 500, 10)) ASSERT_EQ(loaded->Add(id), filter.Add(id));
  EXPECT_EQ(loaded->Serialize(), filter.Serialize());
}

TEST(AdmissionFilterTest, Serialize_NeverAllocated_IsTheShortForm) {
  AdmissionFilter filter = MakeFilter(int64_t{64} << 20, 4);
  const std::string blob = filter.Serialize();
  EXPECT_EQ(blob.size(), AdmissionFilter::kHeaderBytes + AdmissionFilter::kTrailerBytes);
  absl::StatusOr<AdmissionFilter> loaded = AdmissionFilter::Deserialize(blob);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->allocated());
  EXPECT_EQ(loaded->width(), int64_t{8} << 20);
  EXPECT_EQ(loaded->door_bytes(), int64_t{8} << 20);
  EXPECT_EQ(loaded->depth(), 4);
  EXPECT_EQ(loaded->Add(1), 1u);  // allocates then, as a new filter would
  EXPECT_EQ(loaded->bytes(), int64_t{64} << 20);
}

TEST(AdmissionFilterTest, Deserialize_TruncatedOrExtended_IsDataLoss) {
  AdmissionFilter filter = MakeFilter(4096, 2);
  for (int64_t id : RandomStream(5'000, 800, 4)) filter.Add(id);
  const std::string blob = filter.Serialize();
  for (size_t n = 0; n < blob.size(); ++n) {
    absl::StatusOr<AdmissionFilter> loaded = AdmissionFilter::Deserialize(blob.substr(0, n));
    ASSERT_FALSE(loaded.ok()) << n;
    // A cut inside the magic reads as not a filter; any other cut as lost.
    if (n >= AdmissionFilter::kHeaderBytes + AdmissionFilter::kTrailerBytes) {
      EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << n;
    }
  }
  EXPECT_EQ(AdmissionFilter::Deserialize(blob + '\0').status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(AdmissionFilter::Deserialize("").status().code(), absl::StatusCode::kDataLoss);
}

TEST(AdmissionFilterTest, Deserialize_AnyByteFlipped_IsRefused) {
  AdmissionFilter filter = MakeFilter(4096, 2);
  for (int64_t id : RandomStream(5'000, 800, 4)) filter.Add(id);
  const std::string blob = filter.Serialize();
  for (size_t i = 0; i < blob.size(); ++i) {
    for (int bit : {0, 7}) {
      std::string bad = blob;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::StatusOr<AdmissionFilter> loaded = AdmissionFilter::Deserialize(bad);
      ASSERT_FALSE(loaded.ok()) << "byte " << i << " bit " << bit;
      const absl::StatusCode code = loaded.status().code();
      ASSERT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kInvalidArgument)
          << loaded.status();
    }
  }
}

TEST(AdmissionFilterTest, Deserialize_HeaderClaimingHugeFilter_IsRefusedWithoutAllocating) {
  // A header that says 16 rows of 2^62 counters, with nothing after it: the
  // length check must come before any allocation (and not overflow).
  std::string blob = AdmissionFilter::Create(8192, 4)->Serialize();
  blob[5] = 1;  // counters follow
  blob[6] = 16;
  for (int i = 8; i < 16; ++i) blob[i] = 0;
  blob[15] = 0x40;
  EXPECT_EQ(AdmissionFilter::Deserialize(blob).status().code(), absl::StatusCode::kInvalidArgument);
  blob[15] = 0;
  blob[10] = 0x10;  // 2^20 counters a row: in range, but the blob holds none
  EXPECT_EQ(AdmissionFilter::Deserialize(blob).status().code(), absl::StatusCode::kDataLoss);
  std::string no_door = blob;
  for (int i = 16; i < 24; ++i) no_door[i] = 0;  // no doorkeeper bytes
  EXPECT_EQ(AdmissionFilter::Deserialize(no_door).status().code(),
            absl::StatusCode::kInvalidArgument);
  blob[6] = 0;  // depth 0
  EXPECT_EQ(AdmissionFilter::Deserialize(blob).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AdmissionFilterTest, MergeMax_EveryEstimateAtLeastEithers_OtherSizesRefused) {
  AdmissionFilter a = *AdmissionFilter::Create(8 << 10);
  AdmissionFilter b = *AdmissionFilter::Create(8 << 10);
  for (int64_t id = 0; id < 300; ++id) {
    for (int64_t k = 0; k <= id % 4; ++k) (id % 2 == 0 ? a : b).Add(id);
  }
  AdmissionFilter merged = a;
  ASSERT_TRUE(merged.MergeMax(b).ok());
  for (int64_t id = 0; id < 300; ++id) {
    EXPECT_GE(merged.Estimate(id), std::max(a.Estimate(id), b.Estimate(id))) << id;
    EXPECT_GE(merged.Estimate(id), static_cast<uint32_t>(id % 4 + 1)) << "never late: " << id;
  }
  AdmissionFilter empty = *AdmissionFilter::Create(8 << 10);
  ASSERT_TRUE(empty.MergeMax(a).ok());
  EXPECT_EQ(empty.Serialize(), a.Serialize()) << "merged into nothing: a copy";
  AdmissionFilter other = *AdmissionFilter::Create(16 << 10);
  const std::string before = other.Serialize();
  EXPECT_EQ(other.MergeMax(a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.Serialize(), before);
}

TEST(AdmissionFilterTest, Deserialize_RandomBytes_AreRefused) {
  std::mt19937_64 rng(21);
  for (int i = 0; i < 2000; ++i) {
    std::string blob(static_cast<size_t>(rng() % 64), '\0');
    for (char& c : blob) c = static_cast<char>(rng());
    if (i % 2 == 0 && blob.size() >= 4) blob.replace(0, 4, "PSAF");  // get past the magic
    EXPECT_FALSE(AdmissionFilter::Deserialize(blob).ok()) << i;
  }
}

}  // namespace
}  // namespace pst::ps
