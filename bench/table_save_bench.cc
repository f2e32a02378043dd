// table_save_bench: the memory a save and a restore of a hash table with a
// disk tier take (docs/tables.md). One store holds --rows rows (Adam: each
// row --dim values and two slots), --capacity_fraction of them in memory
// and the rest on disk. Each round saves it to a shard file and restores it
// into a new store, twice: streamed, as a ps does (Snapshot streams the
// table, AbsorbShard reads it row by row), and held, the reference: every
// row copied into the record before the file is written, and the file read
// whole before the restore, as a save and a restore held them before the
// streaming. Prints the peak RSS each adds over the RSS before it (VmHWM,
// reset through /proc/self/clear_refs), in MiB and as a share of the bytes
// of the rows held in memory (the capacity's) and of all rows, and how
// long the streamed save held pushes. Rounds alternate the two, so that
// both see the same machine.
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/proc_stats.h"
#include "bench/table_spec.h"
#include "common/checkpoint_format.h"
#include "common/shard_reader.h"
#include "common/tensor_util.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/store_restorer.h"
#include "ps_server/store/variable_store.h"

ABSL_FLAG(int64_t, rows, 1'000'000, "Rows of the table.");
ABSL_FLAG(int, dim, 16, "Floats per row (each of the values and Adam's two slots).");
ABSL_FLAG(double, capacity_fraction, 0.25, "Rows kept in memory, of all.");
ABSL_FLAG(int, rounds, 2, "Rounds; each saves and restores streamed, then held.");
ABSL_FLAG(std::string, dir, "", "Where the disk tier and the shard go (emptied first).");

namespace {

using pst::common::ShardRecord;
using pst::ps::DiskTier;
using pst::ps::VariableStore;

int64_t StatusBytes(const std::string& field) {
  return pst::bench::ProcessMemoryBytes(getpid(), field);
}

// The peak RSS `fn` adds over the RSS before it.
template <typename Fn>
int64_t PeakAdded(Fn fn) {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const int64_t before = StatusBytes("VmRSS");
  fn();
  const int64_t added = StatusBytes("VmHWM") - before;
  malloc_trim(0);
  return added;
}

void Check(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

pst::proto::CreateVariablesRequest Create(int dim, int64_t capacity) {
  pst::proto::CreateVariablesRequest create;
  pst::proto::OptimizerConfig* adam = create.mutable_optimizer();
  adam->set_name("adam");
  adam->set_learning_rate(0.01f);
  adam->set_beta1(0.9f);
  adam->set_beta2(0.999f);
  adam->set_epsilon(1e-7f);
  pst::proto::VariableSpec* spec = create.add_variables();
  *spec = pst::bench::HashTableSpec(dim);
  spec->set_capacity(capacity);
  spec->set_eviction("lru");
  return create;
}

// The held reference: the records of `store` with every row of its
// tables copied in (as Snapshot made them before the streaming).
std::vector<ShardRecord> HeldRecords(const VariableStore& store) {
  std::vector<ShardRecord> records = store.Snapshot();
  for (ShardRecord& r : records) {
    if (r.stream == nullptr) continue;
    const int64_t dim = r.spec.shape(1);
    r.slots.assign(r.stream_slots, {});
    Check(r.stream->ForEach([&](int64_t id, std::span<const float> row, int64_t last,
                                double count) {
            r.hash_ids.push_back(id);
            r.row_last.push_back(last);
            r.row_count.push_back(count);
            r.values.insert(r.values.end(), row.begin(), row.begin() + dim);
            for (int s = 0; s < r.stream_slots; ++s) {
              r.slots[s].insert(r.slots[s].end(), row.begin() + (s + 1) * dim,
                                row.begin() + (s + 2) * dim);
            }
            return absl::OkStatus();
          }),
          "reading the table");
    r.rows = static_cast<int64_t>(r.hash_ids.size());
    r.stream.reset();
  }
  return records;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int64_t capacity =
      std::max<int64_t>(1, static_cast<int64_t>(rows * absl::GetFlag(FLAGS_capacity_fraction)));
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = absl::StrCat("/tmp/table_save_bench-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto opened = DiskTier::Open(dir + "/tier", {});
  Check(opened.status(), "opening the disk tier");
  std::shared_ptr<DiskTier> tier = *std::move(opened);
  VariableStore::Options options;
  options.disk_tier = tier;

  auto owned = std::make_unique<VariableStore>(options);  // goes before the tier's directory
  VariableStore& store = *owned;
  Check(store.Create(Create(dim, capacity)).status(), "creating the table");
  const auto fill_start = std::chrono::steady_clock::now();
  constexpr int64_t kBatch = 8192;
  for (int64_t first = 0, step = 0; first < rows; first += kBatch, ++step) {
    const int64_t n = std::min(kBatch, rows - first);
    pst::proto::PushRowsRequest push;
    push.set_worker_index(0);
    push.set_incarnation(1);
    push.set_step(step);
    pst::proto::RowIds* ids = push.add_rows();
    ids->set_name(pst::bench::kTablePartition);
    for (int64_t k = 0; k < n; ++k) ids->add_ids((first + k) * 2654435761LL);
    const std::vector<float> g(static_cast<size_t>(n * dim), 0.5f);
    pst::common::Shape shape;
    shape.Add(n);
    shape.Add(dim);
    pst::common::PackFloats(g, shape, push.add_gradients());
    pst::proto::PushRowsResponse response;
    Check(store.PushRows(push, &response), "pushing rows");
  }
  const double fill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();
  const VariableStore::Stats stats = store.GetStats();
  const double row_bytes = 3.0 * dim * sizeof(float);
  const double memory_bytes = capacity * row_bytes;
  const double all_bytes = rows * row_bytes;
  std::printf("table: %lld rows of %d floats and 2 slots (%.1f MiB), %lld in memory (%.1f MiB), "
              "%lld on disk; filled in %.1f s\n",
              static_cast<long long>(rows), dim, all_bytes / (1 << 20),
              static_cast<long long>(capacity), memory_bytes / (1 << 20),
              static_cast<long long>(stats.AllTables().rows_on_disk), fill_s);

  const std::string path = dir + "/shard-0-of-1.pst";
  auto restore_streamed = [&] {
    VariableStore restored(options);
    Check(restored.Create(Create(dim, capacity)).status(), "creating the restored table");
    std::unique_ptr<pst::ps::StoreRestorer> restorer = restored.BeginRestore();
    pst::ps::StoreRestorer* restorers[] = {restorer.get()};
    auto reader = pst::common::ShardReader::Open(path);
    Check(reader.status(), "opening the shard");
    Check(pst::ps::AbsorbShard(**reader, restorers), "reading the shard");
    Check(restorer->Commit(1), "committing the restore");
  };
  auto restore_held = [&] {
    VariableStore restored(options);
    Check(restored.Create(Create(dim, capacity)).status(), "creating the restored table");
    auto records = pst::common::ReadShardFile(path);
    Check(records.status(), "reading the shard");
    std::vector<const ShardRecord*> pointers;
    for (const ShardRecord& r : *records) pointers.push_back(&r);
    Check(restored.Restore(pointers, 1), "restoring");
  };
  std::printf("%-10s %-8s %12s %16s %14s %8s %9s\n", "round", "way", "peak MiB", "x memory rows",
              "x all rows", "s", "locked s");
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const bool streamed : {true, false}) {
      for (const bool save : {true, false}) {
        const auto start = std::chrono::steady_clock::now();
        absl::Duration held = absl::ZeroDuration();
        const int64_t added = PeakAdded([&] {
          if (save && streamed) {
            Check(pst::common::WriteShardFile(path, store.Snapshot(&held), nullptr), "saving");
          } else if (save) {
            Check(pst::common::WriteShardFile(path, HeldRecords(store), nullptr), "saving");
          } else if (streamed) {
            restore_streamed();
          } else {
            restore_held();
          }
        });
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("%-10d %-8s %12.1f %16.2f %14.2f %8.1f %9s\n", round,
                    absl::StrCat(save ? "save" : "restore", streamed ? "" : "*").c_str(),
                    added / double(1 << 20), added / memory_bytes, added / all_bytes, s,
                    save && streamed ? absl::StrCat(absl::ToDoubleSeconds(held)).c_str() : "-");
      }
    }
  }
  std::printf("* held: the reference (rows copied into memory, as before the streaming)\n"
              "locked s: how long the streamed save held pushes (its rows in memory written to\n"
              "the scratch table); the held save read every row, on disk too, with pushes held\n");
  owned.reset();
  tier.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
