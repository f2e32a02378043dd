// Small helpers the data readers and generators share: a stable 64-bit mix,
// an owned FILE*, the pieces of their error messages, and the draws of the
// synthetic generators (written out rather than taken from <random>'s
// distributions, so a seed gives the same file with every standard library).
#ifndef PST_DATA_READER_UTIL_H_
#define PST_DATA_READER_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pst::data::data_internal {

// The splitmix64 finalizer: a bijection on 64 bits with good avalanche.
// Generated data and hashed ids depend on it: never change it.
inline uint64_t Mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z;
}

// Closes a FILE* when it goes out of scope.
struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

inline std::string ErrnoText(int errnum) {
  return std::error_code(errnum, std::generic_category()).message();
}

// Values shown in error messages are cut to this many characters.
inline constexpr size_t kMaxShown = 40;

// `value` quoted for an error message, cut to kMaxShown characters.
inline std::string Shown(absl::string_view value) {
  if (value.size() <= kMaxShown) return absl::StrCat("\"", value, "\"");
  return absl::StrCat("\"", value.substr(0, kMaxShown), "...\"");
}

// Uniform double in [0, 1) from the top 53 bits of one draw.
inline double Uniform(std::mt19937_64* rng) {
  return static_cast<double>((*rng)() >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller (one of the pair).
inline double Normal(std::mt19937_64* rng) {
  const double u1 = 1.0 - Uniform(rng);  // (0, 1]: log is finite
  const double u2 = Uniform(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// The cumulative distribution of Zipf over ranks 0..n-1: P(rank k)
// proportional to (k + 1)^-s. The last entry is exactly 1.
// REQUIRES: n >= 1.
inline std::vector<double> ZipfCdf(int64_t n, double s) {
  std::vector<double> cdf(static_cast<size_t>(n));
  double total = 0;
  for (int64_t k = 0; k < n; ++k) {
    total += std::pow(static_cast<double>(k + 1), -s);
    cdf[k] = total;
  }
  for (double& c : cdf) c /= total;
  cdf.back() = 1.0;
  return cdf;
}

// A rank drawn from `cdf` (from ZipfCdf) with one Uniform draw.
inline int64_t DrawRank(const std::vector<double>& cdf, std::mt19937_64* rng) {
  const double u = Uniform(rng);
  const int64_t rank = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
  return std::min(rank, static_cast<int64_t>(cdf.size()) - 1);
}

}  // namespace pst::data::data_internal

#endif  // PST_DATA_READER_UTIL_H_
