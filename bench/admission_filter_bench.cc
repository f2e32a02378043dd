// admission_filter_bench: what AdmissionFilter (ps_server/store/
// admission_filter.h) costs and how often it admits an id early, against
// the exact per-id touch counts it replaces. Prints figures; asserts
// nothing about time.
//
// The stream: --touches ids drawn from a Zipf(--zipf_s) law over --ranks
// ranks, in --phases phases; in phase p rank r is the id mix(r + p *
// --shift), so the head of the law moves to ids not seen before at each
// phase (a churning id space). Seeded (--seed): the same stream each run.
// The defaults draw 20M touches of 6.6M distinct ids in ~20 s on a 2-core
// machine; --touches=32000000 gives 9.9M distinct ids (the size the
// default filter was chosen for; docs/tables.md has both runs).
//
// For each filter size (--filter_bytes), depth (--depths) and threshold
// (--admit_after) it feeds the stream through one filter the way
// HashRowTable does (an id admitted stops counting: it has a row) and,
// alongside, through exact counts, and prints:
//   exact      ids touched admit_after times or more (what exact counts
//              admit)
//   admits     ids the filter admitted
//   false      of those, ids whose true count was below admit_after when
//              admitted (early admissions), as a share of admits and of
//              all distinct ids
//   late       ids whose true count reached admit_after before the filter
//              admitted them: always 0 (the filter never under-counts)
// then the memory of each: the filter's bytes, and the exact map's as absl
// lays it out (capacity() * 16-byte slot + capacity() + 16 control bytes)
// for the most ids ever pending at once (touched, not admitted yet); and
// ns per touch of each, counting every touch of the stream.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "ps_server/store/admission_filter.h"

ABSL_FLAG(int64_t, touches, 20'000'000, "Touches in the stream.");
ABSL_FLAG(int64_t, ranks, 4'000'000'000, "Ranks of the Zipf law (the ids one phase can draw).");
ABSL_FLAG(double, zipf_s, 1.1, "Exponent of the Zipf law.");
ABSL_FLAG(int, phases, 100, "Phases of the stream; each moves the law's head to new ids.");
ABSL_FLAG(int64_t, shift, 1'000'000, "Ranks the law's head moves by at each phase.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the stream.");
ABSL_FLAG(std::string, filter_bytes, "",
          "Comma list of filter sizes in bytes (K/M suffixes: 2^10, 2^20); empty: the default, "
          "AdmissionFilter::kDefaultBytes.");
ABSL_FLAG(std::string, depths, "4", "Comma list of filter depths.");
ABSL_FLAG(std::string, admit_after, "2,3,5", "Comma list of admission thresholds.");

namespace {

using pst::ps::AdmissionFilter;

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Zipf(s) over ranks 1..n by rejection-inversion (Hörmann and Derflinger
// 1996, as in Apache Commons' RejectionInversionZipfSampler): O(1) memory
// and time per draw, whatever n.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s)
      : n_(n),
        s_(s),
        h_x1_(HIntegral(1.5) - 1.0),
        h_n_(HIntegral(static_cast<double>(n) + 0.5)),
        cut_(2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0))) {}

  template <typename Rng>
  int64_t operator()(Rng& rng) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    while (true) {
      const double u = h_n_ + uniform(rng) * (h_x1_ - h_n_);
      const double x = HIntegralInverse(u);
      auto k = static_cast<int64_t>(x + 0.5);
      k = std::clamp<int64_t>(k, 1, n_);
      if (static_cast<double>(k) - x <= cut_ ||
          u >= HIntegral(static_cast<double>(k) + 0.5) - H(static_cast<double>(k))) {
        return k;
      }
    }
  }

 private:
  static double Helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2; }
  static double Helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2; }
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - s_) * log_x) * log_x;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(Helper1(t) * x);
  }

  int64_t n_;
  double s_;
  double h_x1_, h_n_, cut_;
};

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t scale = 1;
    if (part.back() == 'K' || part.back() == 'k') scale = int64_t{1} << 10;
    if (part.back() == 'M' || part.back() == 'm') scale = int64_t{1} << 20;
    if (scale != 1) part.remove_suffix(1);
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      std::fprintf(stderr, "not a number: %s\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v * scale);
  }
  return out;
}

// Bytes of an absl::flat_hash_map<int64_t, int32_t> holding `size` ids (as
// its own growth policy sizes it): 16-byte slots plus one control byte per
// slot and a group's worth of cloned control bytes.
int64_t ExactMapBytes(int64_t size) {
  absl::flat_hash_map<int64_t, int32_t> probe;
  probe.reserve(static_cast<size_t>(size));
  const auto capacity = static_cast<int64_t>(probe.capacity());
  return capacity * static_cast<int64_t>(sizeof(std::pair<const int64_t, int32_t>)) + capacity + 16;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Config {
  int64_t bytes;
  int depth;
  int32_t admit_after;
  AdmissionFilter filter;
  int64_t admits = 0;
  int64_t early = 0;
  int64_t late = 0;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t touches = absl::GetFlag(FLAGS_touches);
  const int phases = std::max(1, absl::GetFlag(FLAGS_phases));
  std::vector<int64_t> sizes = ParseList(absl::GetFlag(FLAGS_filter_bytes));
  if (sizes.empty()) sizes.push_back(AdmissionFilter::kDefaultBytes);
  const std::vector<int64_t> depths = ParseList(absl::GetFlag(FLAGS_depths));
  const std::vector<int64_t> thresholds = ParseList(absl::GetFlag(FLAGS_admit_after));

  std::vector<Config> configs;
  for (int64_t bytes : sizes) {
    for (int64_t depth : depths) {
      for (int64_t a : thresholds) {
        auto filter = AdmissionFilter::Create(bytes, static_cast<int>(depth));
        if (!filter.ok()) {
          std::fprintf(stderr, "%s\n", filter.status().ToString().c_str());
          return 2;
        }
        configs.push_back(
            Config{bytes, static_cast<int>(depth), static_cast<int32_t>(a), *std::move(filter)});
      }
    }
  }
  if (configs.size() > 32) {
    std::fprintf(stderr, "at most 32 filter configurations per run, got %zu\n", configs.size());
    return 2;
  }

  // The stream.
  auto start = std::chrono::steady_clock::now();
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  ZipfSampler zipf(absl::GetFlag(FLAGS_ranks), absl::GetFlag(FLAGS_zipf_s));
  std::vector<int64_t> stream(static_cast<size_t>(touches));
  const int64_t per_phase = (touches + phases - 1) / phases;
  for (int64_t i = 0; i < touches; ++i) {
    const int64_t phase = i / per_phase;
    const int64_t rank = zipf(rng) + phase * absl::GetFlag(FLAGS_shift);
    stream[static_cast<size_t>(i)] = static_cast<int64_t>(Mix64(static_cast<uint64_t>(rank)));
  }
  std::printf(
      "stream: %lld touches, Zipf(%.2f) over %lld ranks, %d phases shifting %lld ranks "
      "each, seed %llu (%.1f s to draw)\n",
      static_cast<long long>(touches), absl::GetFlag(FLAGS_zipf_s),
      static_cast<long long>(absl::GetFlag(FLAGS_ranks)), phases,
      static_cast<long long>(absl::GetFlag(FLAGS_shift)),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)), Seconds(start));

  // Admission: every configuration, against the true counts. An id's entry
  // holds its true count and one bit per configuration that admitted it.
  start = std::chrono::steady_clock::now();
  struct Truth {
    int32_t count = 0;
    uint32_t admitted = 0;
  };
  absl::flat_hash_map<int64_t, Truth> truth;
  std::vector<int64_t> pending(thresholds.size(), 0), peak_pending(thresholds.size(), 0);
  for (int64_t id : stream) {
    Truth& t = truth[id];
    const int32_t count = ++t.count;
    for (size_t k = 0; k < thresholds.size(); ++k) {
      // The exact counts: an id is pending from its first touch to its
      // admit_after-th.
      if (count == 1 && thresholds[k] > 1) ++pending[k];
      if (count == thresholds[k] && count > 1) --pending[k];
      peak_pending[k] = std::max(peak_pending[k], pending[k]);
    }
    for (size_t c = 0; c < configs.size(); ++c) {
      if ((t.admitted >> c) & 1) continue;  // it has a row: no more counting
      Config& config = configs[c];
      if (config.filter.Add(id) >= static_cast<uint32_t>(config.admit_after)) {
        t.admitted |= uint32_t{1} << c;
        ++config.admits;
        if (count < config.admit_after) ++config.early;
      } else if (count >= config.admit_after) {
        ++config.late;
      }
    }
  }
  const auto distinct = static_cast<int64_t>(truth.size());
  std::printf("distinct ids: %lld (%.1f s for the admission pass)\n\n",
              static_cast<long long>(distinct), Seconds(start));
  std::printf("%-12s %5s %11s %11s %11s %9s %10s %10s %6s\n", "filter", "depth", "admit_after",
              "exact", "admits", "false", "false/adm", "false/ids", "late");
  for (const Config& c : configs) {
    int64_t exact = 0;
    for (const auto& [id, t] : truth) exact += t.count >= c.admit_after ? 1 : 0;
    std::printf("%-12lld %5d %11d %11lld %11lld %9lld %9.3f%% %9.3f%% %6lld\n",
                static_cast<long long>(c.bytes), c.depth, c.admit_after,
                static_cast<long long>(exact), static_cast<long long>(c.admits),
                static_cast<long long>(c.early), 100.0 * c.early / std::max<int64_t>(1, c.admits),
                100.0 * c.early / std::max<int64_t>(1, distinct), static_cast<long long>(c.late));
  }
  truth = {};

  std::printf("\nmemory:\n");
  for (size_t c = 0; c < configs.size(); ++c) {
    if (c > 0 && configs[c].bytes == configs[c - 1].bytes) continue;
    std::printf("  filter (--filter_bytes %lld): %lld bytes (%.1f MiB), whatever the ids\n",
                static_cast<long long>(configs[c].bytes),
                static_cast<long long>(configs[c].filter.bytes()),
                configs[c].filter.bytes() / 1048576.0);
  }
  for (size_t k = 0; k < thresholds.size(); ++k) {
    std::printf(
        "  exact counts, admit_after %lld: at most %lld ids pending at once, %lld bytes "
        "(%.1f MiB)\n",
        static_cast<long long>(thresholds[k]), static_cast<long long>(peak_pending[k]),
        static_cast<long long>(ExactMapBytes(peak_pending[k])),
        ExactMapBytes(peak_pending[k]) / 1048576.0);
  }
  configs.clear();

  // Time per touch, counting every touch of the stream.
  std::printf("\ntime per touch (every touch counted; single thread):\n");
  {
    auto filter = *AdmissionFilter::Create(sizes[0], static_cast<int>(depths[0]));
    uint64_t sum = 0;
    start = std::chrono::steady_clock::now();
    for (int64_t id : stream) sum += filter.Add(id);
    const double s = Seconds(start);
    std::printf("  filter (%lld bytes, depth %lld): %.1f ns/touch (checksum %llu)\n",
                static_cast<long long>(sizes[0]), static_cast<long long>(depths[0]),
                1e9 * s / static_cast<double>(touches), static_cast<unsigned long long>(sum));
  }
  {
    absl::flat_hash_map<int64_t, int32_t> counts;
    uint64_t sum = 0;
    start = std::chrono::steady_clock::now();
    for (int64_t id : stream) sum += static_cast<uint64_t>(++counts[id]);
    const double s = Seconds(start);
    std::printf("  exact map (growing to %zu ids): %.1f ns/touch (checksum %llu)\n", counts.size(),
                1e9 * s / static_cast<double>(touches), static_cast<unsigned long long>(sum));
  }
  return 0;
}
