// incremental_save_bench: what an incremental checkpoint writes against a
// full one (docs/checkpoints.md). One store holds a hash table of --rows
// rows (Adagrad: --dim values and one slot each). A full save starts a
// chain (its change tracking on); then --links times, --draws ids drawn
// Zipf(--zipf) over the rows are pushed (in batches of --batch, each
// deduplicated, as a worker's) and an incremental save written on the link
// before. Prints each save's bytes (and the incremental ones' as a share of
// the full one's), the rows it changed, its seconds and how long it held
// pushes; then the seconds a restore takes from the chain's last link
// (every link read in turn) against one from a full save of the same
// instant, and checks that both restore the same table (digests).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/table_spec.h"
#include "common/checkpoint_format.h"
#include "common/shard_reader.h"
#include "common/tensor_util.h"
#include "ps_server/store/store_restorer.h"
#include "ps_server/store/variable_store.h"

ABSL_FLAG(int64_t, rows, 10'000'000, "Rows of the table.");
ABSL_FLAG(int, dim, 16, "Floats per row (its values, and Adagrad's slot as many).");
ABSL_FLAG(double, zipf, 1.1, "Zipf exponent of the ids pushed between saves.");
ABSL_FLAG(int64_t, draws, 2'000'000, "Ids drawn (and pushed) between two saves.");
ABSL_FLAG(int, batch, 4096, "Ids drawn for one push (deduplicated in it).");
ABSL_FLAG(int, links, 3, "Incremental saves after the full one.");
ABSL_FLAG(int, restores, 2, "Rounds of restores, each from the chain then from the full save.");
ABSL_FLAG(std::string, dir, "", "Where the checkpoints go (emptied first, removed after).");

namespace {

using pst::ps::VariableStore;
using Clock = std::chrono::steady_clock;

void Check(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

pst::proto::CreateVariablesRequest Create(int dim) {
  pst::proto::CreateVariablesRequest create;
  pst::proto::OptimizerConfig* adagrad = create.mutable_optimizer();
  adagrad->set_name("adagrad");
  adagrad->set_learning_rate(0.05f);
  *create.add_variables() = pst::bench::HashTableSpec(dim);
  return create;
}

// The id of the row of Zipf rank `rank`: the hot ones spread over the id
// space, as a hashed feature's.
int64_t IdOf(int64_t rank) { return rank * 2654435761LL; }

void Push(VariableStore& store, const std::vector<int64_t>& ids, int dim, int64_t step) {
  pst::proto::PushRowsRequest push;
  push.set_worker_index(0);
  push.set_incarnation(1);
  push.set_step(step);
  pst::proto::RowIds* rows = push.add_rows();
  rows->set_name(pst::bench::kTablePartition);
  for (int64_t id : ids) rows->add_ids(id);
  const std::vector<float> g(ids.size() * dim, 0.01f);
  pst::common::Shape shape;
  shape.Add(static_cast<int64_t>(ids.size()));
  shape.Add(dim);
  pst::common::PackFloats(g, shape, push.add_gradients());
  pst::proto::PushRowsResponse response;
  Check(store.PushRows(push, &response), "pushing rows");
}

struct Saved {
  std::string dir;
  int64_t bytes = 0;
  int64_t rows = 0;
  double seconds = 0;
  double held_ms = 0;
};

// Saves `store` into <root>/<name> (its one shard), incremental on `base`
// ("": full), as a ps does: snapshot, write, then the base moves on.
Saved Save(VariableStore& store, const std::string& root, const std::string& name,
           const std::string& base) {
  Saved saved;
  saved.dir = root + "/" + name;
  std::filesystem::create_directories(saved.dir);
  const auto start = Clock::now();
  VariableStore::SnapshotChanges changes;
  changes.track = true;
  changes.base = base;
  VariableStore::Cut cut;
  absl::Duration held;
  std::vector<pst::common::ShardRecord> records = store.Snapshot(&held, &cut, 0, &changes);
  Check(cut.error, "taking the snapshot");
  if (cut.base_unknown) Check(absl::InternalError("no base"), "taking the snapshot");
  for (const auto& r : records) saved.rows += r.rows + static_cast<int64_t>(r.removed_ids.size());
  pst::proto::CheckpointShard shard;
  Check(pst::common::WriteShardFile(saved.dir + "/" + pst::common::ShardFileName(0, 1), records,
                                    &shard),
        "writing the shard");
  store.SnapshotWritten(cut.seq, name);
  saved.seconds = SecondsSince(start);
  saved.bytes = shard.bytes();
  saved.held_ms = absl::ToDoubleMilliseconds(held);
  return saved;
}

// Restores a new store from `links` (a chain, its full save first) as a ps
// does; returns the seconds it took and its digest.
std::pair<double, uint64_t> Restore(const std::vector<std::string>& links, int dim) {
  VariableStore restored;
  Check(restored.Create(Create(dim)).status(), "creating the restored table");
  const auto start = Clock::now();
  std::unique_ptr<pst::ps::StoreRestorer> restorer = restored.BeginRestore();
  pst::ps::StoreRestorer* restorers[] = {restorer.get()};
  for (size_t i = 0; i < links.size(); ++i) {
    if (i > 0) restorer->NextLink();
    auto reader = pst::common::ShardReader::Open(links[i] + "/" + pst::common::ShardFileName(0, 1));
    Check(reader.status(), "opening a shard");
    Check(pst::ps::AbsorbShard(**reader, restorers), "reading a shard");
  }
  Check(restorer->Commit(1), "committing the restore");
  const double seconds = SecondsSince(start);
  absl::StatusOr<uint64_t> digest = restored.Digest();
  Check(digest.status(), "hashing the restored store");
  return {seconds, *digest};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int batch = absl::GetFlag(FLAGS_batch);
  std::string root = absl::GetFlag(FLAGS_dir);
  if (root.empty()) root = absl::StrCat("/tmp/incremental_save_bench-", getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);

  VariableStore store;
  Check(store.Create(Create(dim)).status(), "creating the table");
  const auto fill_start = Clock::now();
  int64_t step = 0;
  std::vector<int64_t> ids;
  for (int64_t first = 0; first < rows; first += 8192) {
    ids.clear();
    for (int64_t r = first; r < std::min(rows, first + 8192); ++r) ids.push_back(IdOf(r));
    Push(store, ids, dim, step++);
  }
  std::printf(
      "table: %lld rows of %d floats and 1 slot (%.0f MiB of values and slots); filled "
      "in %.1f s\n",
      static_cast<long long>(rows), dim, rows * 2.0 * dim * sizeof(float) / (1 << 20),
      SecondsSince(fill_start));

  // Zipf over the ranks, by inverting its CDF.
  std::vector<double> cdf(static_cast<size_t>(rows));
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sum += std::pow(static_cast<double>(r + 1), -absl::GetFlag(FLAGS_zipf));
    cdf[static_cast<size_t>(r)] = sum;
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, sum);

  std::printf("%-8s %-12s %12s %10s %12s %9s %9s\n", "save", "base", "MB", "x full", "rows", "s",
              "held ms");
  std::vector<Saved> chain = {Save(store, root, pst::common::CheckpointDirName(step), "")};
  std::printf("%-8s %-12s %12.1f %10s %12lld %9.2f %9.1f\n", "full", "-", chain[0].bytes / 1e6,
              "1.00x", static_cast<long long>(chain[0].rows), chain[0].seconds, chain[0].held_ms);
  double ratio_sum = 0;
  for (int link = 1; link <= absl::GetFlag(FLAGS_links); ++link) {
    for (int64_t drawn = 0; drawn < absl::GetFlag(FLAGS_draws); drawn += batch) {
      absl::flat_hash_set<int64_t> unique;
      for (int k = 0; k < batch; ++k) {
        const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
        unique.insert(IdOf(std::min(rank, rows - 1)));
      }
      ids.assign(unique.begin(), unique.end());
      Push(store, ids, dim, step++);
    }
    const std::string base = std::filesystem::path(chain.back().dir).filename().string();
    chain.push_back(Save(store, root, pst::common::CheckpointDirName(step), base));
    const Saved& s = chain.back();
    const double ratio = static_cast<double>(s.bytes) / static_cast<double>(chain[0].bytes);
    ratio_sum += ratio;
    std::printf("%-8s %-12s %12.1f %9.3fx %12lld %9.2f %9.1f\n",
                absl::StrCat("incr ", link).c_str(), base.substr(5).c_str(), s.bytes / 1e6, ratio,
                static_cast<long long>(s.rows), s.seconds, s.held_ms);
  }
  if (absl::GetFlag(FLAGS_links) > 0) {
    std::printf(
        "incremental saves write %.3fx a full save's bytes on average (%lld draws of "
        "Zipf %.2f between saves)\n",
        ratio_sum / absl::GetFlag(FLAGS_links), static_cast<long long>(absl::GetFlag(FLAGS_draws)),
        absl::GetFlag(FLAGS_zipf));
  }

  // The same instant as a full save, a chain of its own (the tracking
  // restarts), for the restores to compare.
  const Saved full_end = Save(store, root + "/full", pst::common::CheckpointDirName(step), "");
  std::printf("full save of the same instant: %.1f MB in %.2f s\n", full_end.bytes / 1e6,
              full_end.seconds);
  std::vector<std::string> links;
  for (const Saved& s : chain) links.push_back(s.dir);
  // Rounds alternate the two, so that both see the same heap (the first
  // restore of a process faults its pages in).
  bool same = true;
  for (int round = 0; round < absl::GetFlag(FLAGS_restores); ++round) {
    const auto [chain_s, chain_digest] = Restore(links, dim);
    const auto [full_s, full_digest] = Restore({full_end.dir}, dim);
    same &= chain_digest == full_digest;
    std::printf(
        "restore %d: from the chain (%zu links) %.2f s, from the full save %.2f s "
        "(%.2fx); the same table: %s\n",
        round, links.size(), chain_s, full_s, full_s > 0 ? chain_s / full_s : 0.0,
        chain_digest == full_digest ? "yes" : "NO");
  }
  std::filesystem::remove_all(root);
  return same ? 0 : 1;
}
