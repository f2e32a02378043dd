// disk_tier_bench: what DiskTier (ps_server/store/disk_tier.h) costs against
// keeping the rows in memory. Prints figures; asserts nothing about time.
//
// In one run, on --rows rows of --width floats (random normal values, as
// trained embeddings and their slots look) plus the eviction entry:
//   put   every row written, in batches of --batch (PutBatch; eviction
//         writes in bursts);
//   get   --reads lookups of ids drawn from a Zipf(--zipf_s) law over the
//         rows (a read that does not bring a row back);
//   take  every row read and deleted, in a random order (rows brought
//         back);
// each on the DiskTier in --dir and on an absl::flat_hash_map doing the same
// copies, with rows/s, MB/s (of floats + entry) and the ratio map/disk.
// --compress: LZ4 on SST blocks (the default is none).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "ps_server/store/disk_tier.h"

ABSL_FLAG(int64_t, rows, 1'000'000, "Rows written, then taken.");
ABSL_FLAG(int64_t, width, 24, "Floats per row.");
ABSL_FLAG(int64_t, reads, 1'000'000, "Zipf-drawn Get lookups.");
ABSL_FLAG(double, zipf_s, 1.1, "Exponent of the Zipf law of the reads.");
ABSL_FLAG(int64_t, batch, 1000, "Rows per PutBatch.");
ABSL_FLAG(int64_t, cache_bytes, int64_t{64} << 20, "DiskTier block cache.");
ABSL_FLAG(int64_t, write_buffer_bytes, pst::ps::DiskTier::Options().write_buffer_bytes,
          "DiskTier memtables, all tables together.");
ABSL_FLAG(bool, compress, false, "LZ4 on SST blocks.");
ABSL_FLAG(std::string, dir, "/tmp/disk_tier_bench", "The DiskTier's directory (wiped).");
ABSL_FLAG(uint64_t, seed, 1, "Seed.");

namespace {

using Clock = std::chrono::steady_clock;

int64_t IdOf(int64_t rank) {
  uint64_t x = static_cast<uint64_t>(rank) + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<int64_t>(x ^ (x >> 31));
}

struct MemRow {
  std::vector<float> values;
  int64_t last;
  double count;
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void Report(const char* op, int64_t n, int64_t row_bytes, double disk_s, double mem_s) {
  std::printf(
      "%-5s %9lld rows  disk %10.0f rows/s %8.1f MB/s  map %11.0f rows/s %8.1f MB/s  "
      "map/disk %6.1fx\n",
      op, static_cast<long long>(n), n / disk_s, n * row_bytes / disk_s / 1e6, n / mem_s,
      n * row_bytes / mem_s / 1e6, disk_s / mem_s);
}

int Run() {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t width = absl::GetFlag(FLAGS_width);
  const int64_t reads = absl::GetFlag(FLAGS_reads);
  const int64_t batch_rows = std::max<int64_t>(1, absl::GetFlag(FLAGS_batch));
  const int64_t row_bytes = width * 4 + 16;
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));

  // The rows, made before any clock runs.
  std::vector<float> values(static_cast<size_t>(rows * width));
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (float& v : values) v = normal(rng);
  auto row = [&](int64_t r) {
    return std::span<const float>(values.data() + r * width, static_cast<size_t>(width));
  };
  // Zipf draws of ranks, by the inverse of the cumulative law.
  std::vector<double> cdf(static_cast<size_t>(rows));
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r)
    cdf[r] = sum += std::pow(r + 1.0, -absl::GetFlag(FLAGS_zipf_s));
  std::uniform_real_distribution<double> uniform(0.0, sum);
  std::vector<int64_t> draws(static_cast<size_t>(reads));
  for (int64_t& d : draws) {
    d = std::min<int64_t>(rows - 1,
                          std::lower_bound(cdf.begin(), cdf.end(), uniform(rng)) - cdf.begin());
  }
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng);

  pst::ps::DiskTier::Options options;
  options.block_cache_bytes = absl::GetFlag(FLAGS_cache_bytes);
  options.compress = absl::GetFlag(FLAGS_compress);
  options.write_buffer_bytes = absl::GetFlag(FLAGS_write_buffer_bytes);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  absl::StatusOr<std::unique_ptr<pst::ps::DiskTier>> opened = pst::ps::DiskTier::Open(dir, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  pst::ps::DiskTier& tier = **opened;
  pst::ps::DiskTier::TableHandle t = tier.Table("bench", width).value();
  absl::flat_hash_map<int64_t, MemRow> map;
  std::printf(
      "disk_tier_bench: %lld rows of %lld floats (%lld B with the entry), zipf %.2f, "
      "batch %lld, cache %lld MiB, memtables %lld MiB, %s\n",
      static_cast<long long>(rows), static_cast<long long>(width),
      static_cast<long long>(row_bytes), absl::GetFlag(FLAGS_zipf_s),
      static_cast<long long>(batch_rows), static_cast<long long>(options.block_cache_bytes >> 20),
      static_cast<long long>(options.write_buffer_bytes >> 20),
      options.compress ? "lz4" : "no compression");

  // put
  Clock::time_point start = Clock::now();
  std::vector<pst::ps::DiskTier::Row> batch;
  for (int64_t r = 0; r < rows; ++r) {
    batch.push_back({IdOf(r), row(r), r, 1.0});
    if (static_cast<int64_t>(batch.size()) == batch_rows || r == rows - 1) {
      absl::Status s = tier.PutBatch(t, batch);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
      batch.clear();
    }
  }
  const double put_disk = Seconds(start);
  start = Clock::now();
  map.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::span<const float> v = row(r);
    map.emplace(IdOf(r), MemRow{std::vector<float>(v.begin(), v.end()), r, 1.0});
  }
  const double put_mem = Seconds(start);
  Report("put", rows, row_bytes, put_disk, put_mem);

  // get
  std::vector<float> out(static_cast<size_t>(width));
  int64_t last = 0;
  double count = 0;
  double check = 0;
  start = Clock::now();
  for (int64_t d : draws) {
    if (!tier.Get(t, IdOf(d), out, &last, &count).value()) return 1;
    check += out[0];
  }
  const double get_disk = Seconds(start);
  start = Clock::now();
  for (int64_t d : draws) {
    const MemRow& m = map.find(IdOf(d))->second;
    std::copy(m.values.begin(), m.values.end(), out.begin());
    last = m.last;
    count = m.count;
    check -= out[0];
  }
  const double get_mem = Seconds(start);
  Report("get", reads, row_bytes, get_disk, get_mem);

  // take
  start = Clock::now();
  for (int64_t r : order) {
    if (!tier.Take(t, IdOf(r), out, &last, &count).value()) return 1;
    check += out[0];
  }
  const double take_disk = Seconds(start);
  start = Clock::now();
  for (int64_t r : order) {
    auto it = map.find(IdOf(r));
    std::copy(it->second.values.begin(), it->second.values.end(), out.begin());
    last = it->second.last;
    count = it->second.count;
    map.erase(it);
    check -= out[0];
  }
  const double take_mem = Seconds(start);
  Report("take", rows, row_bytes, take_disk, take_mem);
  const pst::ps::DiskTier::Figures f = tier.figures();
  std::printf(
      "disk: %lld reads, %lld writes, %.1f MB written by Put (keys + values); left %lld "
      "rows; check %g\n",
      static_cast<long long>(f.reads), static_cast<long long>(f.writes), f.bytes_written / 1e6,
      static_cast<long long>(tier.Count(t)), check);
  opened->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Run();
}
