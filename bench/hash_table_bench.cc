// hash_table_bench: what a bounded hash table costs a ps per push, without
// the network: row pushes (Variable::ApplyRows, SGD) of the same batches
// into an unbounded table and into one bounded to --capacity_fraction of
// the distinct ids (--eviction), in alternate rounds on one thread. The
// batches are what one of two ps gets in make bench-tables: --rows ids
// drawn from a Zipf(1.1) law over 1M ranks, the even ones, each once.
// Both tables take every batch once first, untimed. Prints CPU ns per
// push of each and their ratio (unbounded over bounded: the rows/s ratio
// the ps alone would give), and the evictions per push; then the wall time
// of a restore's load of every distinct id into a bounded table. Seeded:
// the same batches each run.
//
// With --table_store_dir, the bounded table keeps the rows past its
// capacity on disk (the disk tier, RocksDB there), and the bench also pulls
// each batch (Variable::ReadRows) from both tables: it prints the wall time
// per push and per pull of each (a row on disk costs I/O waits, not only
// CPU) and the bounded table's rows per second as a share of the
// unbounded one's, for pushes and for pulls.
//
// With --tracked, it also times an unbounded table whose changes are noted
// for incremental checkpoints (HashRowTable::TrackChanges), against the
// unbounded one, the notes taken after each round as a save takes them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/optimizer.h"
#include "ps_server/store/variable.h"

ABSL_FLAG(int, rows, 4096, "Ids drawn per push (before the odd ones and repeats go).");
ABSL_FLAG(int, dim, 64, "Floats per row.");
ABSL_FLAG(int, batches, 64, "Distinct batches, pushed in turn.");
ABSL_FLAG(double, capacity_fraction, 0.25, "The bounded table's capacity, of the distinct ids.");
ABSL_FLAG(std::string, eviction, "lru", "The bounded table's policy (lru, lfu[:H], ttl:N).");
ABSL_FLAG(int, rounds, 5, "Rounds; each pushes every batch into each table.");
ABSL_FLAG(int, passes, 4, "Passes over the batches per round and table.");
ABSL_FLAG(std::string, table_store_dir, "",
          "The bounded table's disk tier (emptied first); empty: rows evicted are forgotten.");
ABSL_FLAG(int64_t, table_store_cache_bytes, int64_t{64} << 20, "The disk tier's block cache.");
ABSL_FLAG(int64_t, table_store_write_buffer_bytes, int64_t{64} << 20,
          "The disk tier's memtables, all tables together.");
ABSL_FLAG(bool, tracked, false,
          "Also time an unbounded table that notes its changes (incremental checkpoints).");

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

pst::proto::VariableSpec HashSpec(const std::string& name, int dim, int64_t capacity,
                                  const std::string& eviction) {
  pst::proto::VariableSpec spec;
  spec.set_name(name + "/part_0");
  spec.set_variable(name);
  spec.set_dtype(pst::proto::DT_FLOAT32);
  spec.add_shape(0);
  spec.add_shape(dim);
  spec.mutable_initializer()->set_kind(pst::proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(0.5f);
  spec.mutable_initializer()->set_seed(7);
  spec.set_routing(pst::proto::HASH);
  spec.set_partition(0);
  spec.set_num_partitions(1);
  spec.set_admit_after(1);
  spec.set_capacity(capacity);
  spec.set_eviction(eviction);
  return spec;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int dim = absl::GetFlag(FLAGS_dim);
  // Zipf(1.1) over 1M ranks by inverse CDF; rank r is id r.
  const int ranks = 1 << 20;
  std::vector<double> cdf(ranks);
  double sum = 0;
  for (int r = 0; r < ranks; ++r) cdf[r] = (sum += 1.0 / std::pow(r + 1, 1.1));
  std::mt19937_64 rng(2000);
  std::vector<std::vector<int64_t>> batches(absl::GetFlag(FLAGS_batches));
  std::set<int64_t> all;
  size_t ids_pushed = 0;
  for (std::vector<int64_t>& batch : batches) {
    std::set<int64_t> ids;
    for (int i = 0; i < absl::GetFlag(FLAGS_rows); ++i) {
      const double u = std::uniform_real_distribution<double>(0, sum)(rng);
      const int64_t id = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      if (id % 2 == 0) ids.insert(id);
    }
    batch.assign(ids.begin(), ids.end());
    std::shuffle(batch.begin(), batch.end(), rng);
    all.insert(ids.begin(), ids.end());
    ids_pushed += batch.size();
  }
  const auto capacity = static_cast<int64_t>(absl::GetFlag(FLAGS_capacity_fraction) *
                                             static_cast<double>(all.size()));
  pst::proto::OptimizerConfig config;
  config.set_name("sgd");
  config.set_learning_rate(1e-6f);
  std::unique_ptr<pst::ps::Optimizer> sgd = *pst::ps::CreateOptimizer(config);
  std::unique_ptr<pst::ps::DiskTier> disk;  // outlives the tables
  pst::ps::Variable unbounded(HashSpec("bench_hash", dim, 0, ""), *sgd, {});
  pst::ps::Variable bounded(
      HashSpec("bench_hash_evict", dim, capacity, absl::GetFlag(FLAGS_eviction)), *sgd, {});
  if (const std::string dir = absl::GetFlag(FLAGS_table_store_dir); !dir.empty()) {
    pst::ps::DiskTier::Options options;
    options.block_cache_bytes = absl::GetFlag(FLAGS_table_store_cache_bytes);
    options.write_buffer_bytes = absl::GetFlag(FLAGS_table_store_write_buffer_bytes);
    absl::StatusOr<std::unique_ptr<pst::ps::DiskTier>> opened =
        pst::ps::DiskTier::Open(dir, options);
    if (!opened.ok()) {
      std::fprintf(stderr, "hash_table_bench: %s\n", std::string(opened.status().message()).c_str());
      return 2;
    }
    disk = *std::move(opened);
    absl::MutexLock lock(&bounded.mu);
    if (absl::Status s = bounded.table.UseDisk(disk.get(), "bench_hash_evict"); !s.ok()) {
      std::fprintf(stderr, "hash_table_bench: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  std::vector<float> grad(static_cast<size_t>(absl::GetFlag(FLAGS_rows)) * dim, 1e-3f);
  auto push_all = [&](pst::ps::Variable& var, int passes) {
    int64_t dropped = 0;
    for (int p = 0; p < passes; ++p) {
      for (const std::vector<int64_t>& batch : batches) {
        var.ApplyRows(batch, grad, std::vector<bool>(batch.size(), false), &dropped);
      }
    }
  };
  push_all(unbounded, 1);
  push_all(bounded, 1);
  std::printf("%zu distinct ids, %.0f per push; bounded: %lld rows (%s)\n", all.size(),
              static_cast<double>(ids_pushed) / batches.size(), static_cast<long long>(capacity),
              absl::GetFlag(FLAGS_eviction).c_str());
  double seconds[2] = {0, 0};
  const int64_t evictions_before = bounded.table_unlocked().evictions();
  const int passes = absl::GetFlag(FLAGS_passes);
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    double start = CpuSeconds();
    push_all(unbounded, passes);
    seconds[0] += CpuSeconds() - start;
    start = CpuSeconds();
    push_all(bounded, passes);
    seconds[1] += CpuSeconds() - start;
  }
  const double pushes = static_cast<double>(absl::GetFlag(FLAGS_rounds)) * passes * batches.size();
  std::printf("unbounded %.1f us/push, bounded %.1f us/push: ratio %.3fx; %.1f evictions/push\n",
              seconds[0] / pushes * 1e6, seconds[1] / pushes * 1e6, seconds[0] / seconds[1],
              static_cast<double>(bounded.table_unlocked().evictions() - evictions_before) / pushes);
  if (absl::GetFlag(FLAGS_tracked)) {
    pst::ps::Variable tracked(HashSpec("bench_hash_tracked", dim, 0, ""), *sgd, {});
    {
      absl::MutexLock lock(&tracked.mu);
      tracked.table.TrackChanges(true);
    }
    push_all(tracked, 1);
    double untracked_s = 0, tracked_s = 0;
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      double start = CpuSeconds();
      push_all(unbounded, passes);
      untracked_s += CpuSeconds() - start;
      start = CpuSeconds();
      push_all(tracked, passes);
      tracked_s += CpuSeconds() - start;
      absl::MutexLock lock(&tracked.mu);
      tracked.table.TakeChanges();  // a save's, untimed
    }
    std::printf("unbounded %.1f us/push, noting its changes %.1f us/push: ratio %.3fx\n",
                untracked_s / pushes * 1e6, tracked_s / pushes * 1e6, untracked_s / tracked_s);
  }
  {
    // A restore's part: a bounded table takes every distinct id at once
    // (HashRowTable::Replace, as from a checkpoint), each with a last
    // update drawn at random, the order a checkpoint's rows come in.
    pst::ps::Variable restored(
        HashSpec("bench_hash_restore", dim, capacity, absl::GetFlag(FLAGS_eviction)), *sgd, {});
    pst::ps::HashRowTable::Rows rows;
    pst::ps::HashRowTable::Entries entries;
    std::mt19937_64 lasts(3);
    const int64_t versions = static_cast<int64_t>(pushes) * 4;
    for (int64_t id : all) {
      rows[id] = std::vector<float>(static_cast<size_t>(dim), 0.5f);
      entries[id] = {static_cast<int64_t>(lasts() % static_cast<uint64_t>(versions)), 1.0, 0.0};
    }
    const double start = WallSeconds();
    absl::MutexLock lock(&restored.mu);
    if (absl::Status s = restored.table.Replace(std::move(rows), versions, entries); !s.ok()) {
      std::fprintf(stderr, "hash_table_bench: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    std::printf("restore: %zu rows with %lld versions of last update into the bounded table in "
                "%.3f s\n",
                all.size(), static_cast<long long>(versions), WallSeconds() - start);
  }
  if (disk == nullptr) return 0;
  // The disk tier: wall time, pushes then pulls, in alternate rounds.
  std::vector<float> out(grad.size());
  auto pull_all = [&](pst::ps::Variable& var, int passes) {
    for (int p = 0; p < passes; ++p) {
      for (const std::vector<int64_t>& batch : batches) var.ReadRows(batch, out.data());
    }
  };
  double push_wall[2] = {0, 0}, pull_wall[2] = {0, 0};
  const int64_t reads_before = bounded.table_unlocked().disk_reads();
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    pst::ps::Variable* vars[2] = {&unbounded, &bounded};
    for (int v = 0; v < 2; ++v) {
      double start = WallSeconds();
      push_all(*vars[v], passes);
      push_wall[v] += WallSeconds() - start;
      start = WallSeconds();
      pull_all(*vars[v], passes);
      pull_wall[v] += WallSeconds() - start;
    }
  }
  std::printf(
      "disk tier: %lld rows on disk; wall us/push %.1f unbounded, %.1f bounded (%.3fx); "
      "us/pull %.1f, %.1f (%.3fx); %.1f disk reads/op\n",
      static_cast<long long>(bounded.table_unlocked().rows_on_disk()), push_wall[0] / pushes * 1e6,
      push_wall[1] / pushes * 1e6, push_wall[0] / push_wall[1], pull_wall[0] / pushes * 1e6,
      pull_wall[1] / pushes * 1e6, pull_wall[0] / pull_wall[1],
      static_cast<double>(bounded.table_unlocked().disk_reads() - reads_before) / (2 * pushes));
  return 0;
}
