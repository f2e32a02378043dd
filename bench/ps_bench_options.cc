#include "bench/ps_bench_options.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "tools/shaped_link.h"
#include "tools/subprocess.h"

namespace pst::bench {
namespace {

absl::StatusOr<std::vector<int>> ParseCounts(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a count between 1 and 64"));
    }
    out.push_back(n);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

// "1M" -> 1048576, "4096" -> 4096, "16K" -> 16384.
absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::string digits(part);
    int64_t unit = 1;
    if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) unit = int64_t{1} << 10;
    if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) unit = int64_t{1} << 20;
    if (!digits.empty() && (digits.back() == 'G' || digits.back() == 'g')) unit = int64_t{1} << 30;
    if (unit != 1) digits.pop_back();
    int64_t n = 0;
    if (!absl::SimpleAtoi(digits, &n) || n < 1 || n > (int64_t{1} << 32) / unit) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a float count such as 4096, 1M or 64M"));
    }
    out.push_back(n * unit);
  }
  return out;
}

}  // namespace

double TopKRatio(absl::string_view wire) {
  double ratio = 0;
  if (!absl::ConsumePrefix(&wire, "topk:") || !absl::SimpleAtod(wire, &ratio) ||
      !(ratio > 0 && ratio <= 1)) {
    return 0;
  }
  return ratio;
}

absl::StatusOr<Options> ParseOptions(const OptionFlags& flags) {
  Options o;
  PST_ASSIGN_OR_RETURN(o.ps_counts, ParseCounts("ps", flags.ps));
  PST_ASSIGN_OR_RETURN(o.worker_counts, ParseCounts("workers", flags.workers));
  o.workers_as.clear();
  for (absl::string_view part : absl::StrSplit(flags.workers_as, ',', absl::SkipWhitespace())) {
    if (part != "threads" && part != "processes") {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers_as: '", part, "' is not threads or processes"));
    }
    if (std::find(o.workers_as.begin(), o.workers_as.end(), part) == o.workers_as.end()) {
      o.workers_as.emplace_back(part);
    }
  }
  if (o.workers_as.empty()) return absl::InvalidArgumentError("--workers_as is empty");
  o.link_rate = flags.link_rate;
  o.ps_replicas = flags.ps_replicas;
  if (o.ps_replicas != 1 && o.ps_replicas != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_replicas must be 1 or 2, not ", o.ps_replicas));
  }
  o.scaling_link_rate = flags.scaling_link_rate;
  auto check_rate = [](const char* flag, const std::string& rate) {
    if (rate.empty() || tools::IsTcRate(rate)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", rate, " is not a tc rate such as 2gbit or 500mbit"));
  };
  PST_RETURN_IF_ERROR(check_rate("link_rate", o.link_rate));
  PST_RETURN_IF_ERROR(check_rate("scaling_link_rate", o.scaling_link_rate));
  o.scaling = flags.scaling;
  if (o.scaling) {
    PST_ASSIGN_OR_RETURN(const std::vector<int64_t> scaling_size,
                         ParseSizes("scaling_size", flags.scaling_size));
    if (scaling_size.size() != 1 || scaling_size[0] < 2) {
      return absl::InvalidArgumentError("--scaling_size must be one size of at least 2 floats");
    }
    o.scaling_size = scaling_size[0];
    if (o.scaling_link_rate.empty()) {
      return absl::InvalidArgumentError("--scaling_link_rate is empty");
    }
  }
  o.dense_piece_bytes = flags.dense_piece_bytes;
  if (o.dense_piece_bytes < 0) {
    return absl::InvalidArgumentError("--dense_piece_bytes must be >= 0 (0: never cut)");
  }
  PST_ASSIGN_OR_RETURN(o.sizes, ParseSizes("sizes", flags.sizes));
  o.rows = flags.rows;
  o.dim = flags.dim;
  o.table_rows = flags.table_rows;
  o.zipf_s = flags.zipf_s;
  o.case_budget = absl::Seconds(flags.seconds_per_case);
  o.min_iters = flags.min_iters;
  o.rounds = flags.rounds;
  o.reference_budget = absl::Seconds(flags.reference_seconds);
  o.json = flags.json;
  o.ps_server = flags.ps_server;
  if (o.ps_server.empty()) o.ps_server = tools::ExecutableDir() + "/ps_server";
  o.rpc_timeout = absl::Seconds(flags.rpc_timeout_s);
  o.verbose = flags.verbose;
  o.wire.clear();
  for (absl::string_view part : absl::StrSplit(flags.wire, ',', absl::SkipWhitespace())) {
    if (part != "float32" && part != "bf16" && TopKRatio(part) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--wire: '", part, "' is not float32, bf16 or topk:RATIO (0 < RATIO <= 1)"));
    }
    if (std::find(o.wire.begin(), o.wire.end(), part) == o.wire.end()) o.wire.emplace_back(part);
  }
  if (o.wire.empty()) return absl::InvalidArgumentError("--wire is empty");
  o.bdp_probe = flags.bdp_probe;
  const std::set<std::string> known = {"push",        "pull",      "pushpull",       "sparse_pull",
                                       "sparse_push", "hash_push", "hash_push_evict"};
  for (absl::string_view c : absl::StrSplit(flags.cases, ',', absl::SkipWhitespace())) {
    if (known.count(std::string(c)) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cases: unknown case '", c,
                       "' (known: push, pull, pushpull, sparse_pull, sparse_push, hash_push, "
                       "hash_push_evict)"));
    }
    o.cases.insert(std::string(c));
  }
  if (o.cases.empty()) return absl::InvalidArgumentError("--cases is empty");
  if (o.AnyDense() && o.sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  const int max_ps = *std::max_element(o.ps_counts.begin(), o.ps_counts.end());
  for (int64_t s : o.sizes) {
    if (s < max_ps) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: ", s, " floats cannot be split over ", max_ps, " ps"));
    }
  }
  o.hash_capacity_fraction = flags.hash_capacity_fraction;
  o.hash_eviction = flags.hash_eviction;
  o.hash_batches = flags.hash_batches;
  if (o.AnyHash() && (o.hash_batches < 1 || o.hash_batches > 65536)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hash_batches must be in [1, 65536], got ", o.hash_batches));
  }
  o.table_store_dir = flags.table_store_dir;
  if (o.Has("hash_push_evict") && !(o.hash_capacity_fraction > 0 && o.hash_capacity_fraction < 1)) {
    return absl::InvalidArgumentError("--hash_capacity_fraction must be in (0, 1)");
  }
  if (o.AnySparse() || o.AnyHash()) {
    if (o.rows < 1 || o.dim < 1 || o.table_rows < max_ps) {
      return absl::InvalidArgumentError(
          "--rows and --dim must be >= 1 and --table_rows at least the number of ps");
    }
    if (!(o.zipf_s > 0)) return absl::InvalidArgumentError("--zipf_s must be > 0");
  }
  if (o.case_budget < absl::ZeroDuration() || o.min_iters < 1 || o.rounds < 1 ||
      o.reference_budget <= absl::ZeroDuration() || o.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--seconds_per_case must be >= 0, --min_iters and --rounds >= 1, --reference_seconds "
        "and --rpc_timeout_s > 0");
  }
  return o;
}

std::string SizeName(int64_t floats) {
  if (floats % (int64_t{1} << 20) == 0) return absl::StrCat(floats >> 20, "M");
  if (floats % (int64_t{1} << 10) == 0) return absl::StrCat(floats >> 10, "K");
  return absl::StrCat(floats);
}

}  // namespace pst::bench
