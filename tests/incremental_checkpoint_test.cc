// Incremental checkpoints end to end, in one process: the chief's saves
// (chief::SaveCheckpoint) and restores (chief::RestoreLatest) over the
// in-process control, each ps noting which rows change (VariableStore's
// change tracking) and writing only those, the manifests chaining the
// links, and a restore reading the chain link by link. The state a chain's
// last link restores is bit for bit a full save's of the same instant,
// onto the same and onto another number of ps; with tables that evict
// rows (the links remove ids) and tables that keep rows on disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/checkpointing.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_export.h"
#include "common/checkpoint_format.h"
#include "ps_server/in_process_control.h"
#include "spdlog/spdlog.h"
#include "tests/wide_deep_stores.h"

namespace pst::testing {
namespace {

namespace fs = std::filesystem;

// spdlog's default logger is made on the first log call of the process,
// inside libspdlog: made here, on the main thread, before two ps' save
// threads log at once (ThreadSanitizer does not see the guard inside the
// library that orders their first calls).
class LoggerFirst : public ::testing::Environment {
 public:
  void SetUp() override { spdlog::default_logger(); }
};
::testing::Environment* const kLoggerFirst = ::testing::AddGlobalTestEnvironment(new LoggerFirst);

struct ChainCase {
  int64_t buckets;  // 0: hash embeddings
  int old_ps, new_ps;
  int64_t capacity = 0;  // hash: rows a table keeps a ps (lru)
  bool disk = false;     // the rows past the capacity go to disk, else they go
};

// The chief's side of one cluster: its options, its view of the ps, and the
// state it saves with.
struct Chief {
  chief::ChiefOptions options;
  std::vector<chief::PsPeer> peers;
  proto::ClusterState state;
  ps::InProcessPsControl control;

  Chief(const Cluster& cluster, const proto::TrainingConfig& training, const std::string& root)
      : control(cluster.ps) {
    options.checkpoint_dir = root;
    options.keep_checkpoints = 1;  // a chain is one
    for (int p = 0; p < cluster.ps->num_ps(); ++p) {
      peers.push_back({absl::StrCat("ps ", p), ps::InProcessPs::IncarnationOf(p, 0), {}});
    }
    *state.mutable_plan() = *BuildPlan(training, cluster.ps->num_ps());
    *state.mutable_training() = training;
    state.set_num_workers(1);
  }

  absl::StatusOr<chief::SaveFigures> Save(int64_t step, const std::string& base) {
    chief::SaveKind kind;
    kind.track_changes = true;
    kind.base = base;
    return chief::SaveCheckpoint(control, peers, options, state, step, {step}, 0, 0, kind);
  }
};

// Every store's digest (all rows of every table, whatever their tier).
std::vector<uint64_t> Digests(const Cluster& cluster) {
  std::vector<uint64_t> digests;
  for (int p = 0; p < cluster.ps->num_ps(); ++p) {
    absl::StatusOr<uint64_t> d = cluster.transport->store(p)->Digest();
    EXPECT_TRUE(d.ok()) << d.status();
    digests.push_back(d.ok() ? *d : 0);
  }
  return digests;
}

// Writes every store of `cluster` as a full checkpoint would hold it into
// `dir` (no change tracking touched), for a reference restore, with the
// manifest of the checkpoint `like` but for its shards and base.
void WriteFull(Cluster& cluster, const std::string& dir, const std::string& like) {
  fs::create_directories(dir);
  proto::CheckpointManifest manifest = *common::ReadManifest(like);
  manifest.clear_base();
  manifest.clear_shards();
  for (int p = 0; p < cluster.ps->num_ps(); ++p) {
    proto::CheckpointShard* shard = manifest.add_shards();
    ASSERT_TRUE(common::WriteShardFile(
                    absl::StrCat(dir, "/", common::ShardFileName(p, cluster.ps->num_ps())),
                    cluster.transport->store(p)->Snapshot(), shard)
                    .ok());
    shard->set_ps_index(p);
  }
  ASSERT_TRUE(common::WriteManifest(dir, manifest).ok());
}

// The tensors `pstrain checkpoint export` writes of checkpoint `dir` (the
// safetensors file past its header, which names the checkpoint), slots
// included.
std::string ExportedTensors(const std::string& dir, const std::string& out) {
  common::ExportOptions options;
  options.include_slots = true;
  absl::StatusOr<common::ExportResult> exported = common::ExportSafetensors(dir, out, options);
  EXPECT_TRUE(exported.ok()) << exported.status();
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header = 0;
  if (bytes.size() < 8) return "";
  std::memcpy(&header, bytes.data(), 8);
  return bytes.substr(8 + header);
}

// Restores every store of `cluster` from the full shards in `dir`.
void RestoreFull(Cluster& cluster, const std::string& dir, int num_files) {
  std::vector<std::vector<common::ShardRecord>> shards;
  for (int p = 0; p < num_files; ++p) {
    shards.push_back(
        *common::ReadShardFile(absl::StrCat(dir, "/", common::ShardFileName(p, num_files))));
  }
  std::vector<const common::ShardRecord*> records;
  for (const auto& s : shards) {
    for (const auto& r : s) records.push_back(&r);
  }
  for (int p = 0; p < cluster.ps->num_ps(); ++p) {
    absl::Status restored = cluster.transport->store(p)->Restore(records);
    ASSERT_TRUE(restored.ok()) << restored;
  }
}

// The rows of `table` a checkpoint's own shards hold, and the ids they remove.
std::pair<int64_t, int64_t> LinkRows(const std::string& dir, const std::string& table) {
  absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(dir);
  EXPECT_TRUE(report.ok()) << report.status();
  int64_t rows = 0, removed = 0;
  for (const auto& v : report->variables) {
    if (v.name.rfind(table, 0) != 0) continue;
    rows += v.rows;
    removed += v.removed;
  }
  return {rows, removed};
}

class IncrementalCheckpointTest : public ::testing::TestWithParam<ChainCase> {};

TEST_P(IncrementalCheckpointTest, ChainRestore_IsAFullSavesState_BitForBit) {
  const ChainCase c = GetParam();
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/incremental_", getpid(), "_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  // Removed last, once the stores and their disk tier are gone.
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  const std::string root = dir + "/ckpt";
  fs::create_directories(root);
  std::shared_ptr<ps::DiskTier> disk;
  if (c.disk) {
    ps::DiskTier::Options options;
    options.block_cache_bytes = options.write_buffer_bytes = 4 << 20;
    disk = *ps::DiskTier::Open(dir + "/tables", options);
  }
  auto id_of = [&](int64_t i) { return c.buckets > 0 ? i : i * 7919 + 1; };
  std::vector<int64_t> first, some, others, all;
  for (int64_t i = 0; i < 26 * kBuckets; i += 3) first.push_back(id_of(i));
  for (int64_t i = 0; i < 26 * kBuckets; i += 9) some.push_back(id_of(i));
  for (int64_t i = 1; i < 26 * kBuckets; i += 5) others.push_back(id_of(i));
  for (int64_t i = 0; i < 26 * kBuckets; ++i) all.push_back(id_of(i));

  const proto::TrainingConfig training = Training(c.old_ps, proto::MOD, c.buckets, c.capacity);
  Cluster old_cluster(training, c.old_ps, disk, root);
  Chief chief(old_cluster, training, root);

  // A full save, then two incremental ones: rows only (no dense variable
  // moves), then dense variables and rows of ids not seen before (a table
  // with a capacity evicts).
  for (int step = 0; step < 5; ++step) old_cluster.Step(step, first, 100 + step);
  absl::StatusOr<chief::SaveFigures> full = chief.Save(5, "");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_FALSE(full->incremental);
  for (int step = 5; step < 7; ++step) old_cluster.Step(step, some, 100 + step, /*dense=*/false);
  absl::StatusOr<chief::SaveFigures> one = chief.Save(7, full->name);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(one->incremental);
  WriteFull(old_cluster, dir + "/full_one", root + "/" + one->name);
  for (int step = 7; step < 10; ++step) old_cluster.Step(step, others, 100 + step);
  absl::StatusOr<chief::SaveFigures> two = chief.Save(10, one->name);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_TRUE(two->incremental);
  WriteFull(old_cluster, dir + "/full_two", root + "/" + two->name);
  // Exported, the chain is the full save.
  const std::string chain_tensors = ExportedTensors(root + "/" + two->name, dir + "/chain.st");
  EXPECT_FALSE(chain_tensors.empty());
  EXPECT_EQ(chain_tensors, ExportedTensors(dir + "/full_two", dir + "/full.st"));

  EXPECT_EQ(common::ReadManifest(root + "/" + one->name)->base(), full->name);
  EXPECT_EQ(common::ReadManifest(root + "/" + two->name)->base(), one->name);
  EXPECT_EQ(common::ListCheckpoints(root).size(), 3u) << "keep=1 keeps the chain whole";
  EXPECT_LT(one->bytes, full->bytes);
  if (c.buckets == 0 && c.capacity == 0) {
    // The first link holds each row pushed since the full save, once, and
    // no dense variable (none moved).
    EXPECT_EQ(LinkRows(root + "/" + one->name, kDeepEmbedding).first,
              static_cast<int64_t>(some.size()));
    const absl::StatusOr<common::CheckpointReport> report =
        common::InspectCheckpoint(root + "/" + one->name);
    ASSERT_TRUE(report.ok()) << report.status();
    for (const auto& v : report->variables) {
      EXPECT_TRUE(v.name.rfind("deep/embedding", 0) == 0 || v.name.rfind("wide/embedding", 0) == 0)
          << v.name << " did not change";
    }
  }
  if (c.capacity > 0 && !c.disk) {
    EXPECT_GT(LinkRows(root + "/" + two->name, kDeepEmbedding).second, 0)
        << "evicted rows are removed by the link";
  }

  // The chain's last link onto a new cluster (another number of ps,
  // another routing) and a full save of the same instant onto another:
  // the same stores, bit for bit.
  const proto::TrainingConfig new_training = Training(c.new_ps, proto::DIV, c.buckets, c.capacity);
  auto restored = [&](const std::string& where) {
    auto cluster = std::make_unique<Cluster>(new_training, c.new_ps, disk, where);
    return cluster;
  };
  std::unique_ptr<Cluster> from_chain = restored(root);
  Chief new_chief(*from_chain, new_training, root);
  absl::StatusOr<std::optional<proto::CheckpointManifest>> manifest = chief::RestoreLatest(
      new_chief.control, new_chief.peers, new_chief.options, 0, new_chief.state);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(manifest->has_value());
  EXPECT_EQ((*manifest)->global_step(), two->step);
  std::unique_ptr<Cluster> from_full = restored("");
  RestoreFull(*from_full, dir + "/full_two", c.old_ps);
  EXPECT_EQ(Digests(*from_chain), Digests(*from_full));
  EXPECT_EQ(from_chain->All(all), from_full->All(all));
  // And the saved cluster's, unless the new ps keep fewer rows in all than
  // the old ones did (their capacity evicts when restoring).
  const bool all_rows_kept = c.capacity == 0 || c.disk;
  if (all_rows_kept) {
    EXPECT_EQ(from_chain->All(all), old_cluster.All(all));
  }

  // The optimizer state came along: one more identical step stays identical.
  old_cluster.Step(10, all, 999);
  from_chain->Step(10, all, 999);
  from_full->Step(10, all, 999);
  EXPECT_EQ(from_chain->All(all), from_full->All(all));
  if (all_rows_kept) {
    EXPECT_EQ(from_chain->All(all), old_cluster.All(all));
  }

  // A corrupt last link: the restore falls back to the link before it,
  // which is the full save of its instant.
  const std::string shard = root + "/" + two->name + "/" + common::ShardFileName(0, c.old_ps);
  {
    std::fstream f(shard, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put('\x5a');
  }
  std::unique_ptr<Cluster> fallback = restored(root);
  Chief fallback_chief(*fallback, new_training, root);
  manifest = chief::RestoreLatest(fallback_chief.control, fallback_chief.peers,
                                  fallback_chief.options, 0, fallback_chief.state);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(manifest->has_value());
  EXPECT_EQ((*manifest)->global_step(), one->step);
  std::unique_ptr<Cluster> from_full_one = restored("");
  RestoreFull(*from_full_one, dir + "/full_one", c.old_ps);
  EXPECT_EQ(Digests(*fallback), Digests(*from_full_one));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, IncrementalCheckpointTest,
    ::testing::Values(ChainCase{kBuckets, 2, 2}, ChainCase{kBuckets, 2, 3}, ChainCase{0, 2, 3},
                      ChainCase{0, 2, 3, 20}, ChainCase{0, 2, 1, 20},
                      ChainCase{0, 2, 3, 20, /*disk=*/true}),
    [](const auto& info) {
      return absl::StrCat(info.param.buckets > 0 ? "Tables" : "Hash",
                          info.param.capacity > 0 ? (info.param.disk ? "OnDisk" : "Evicting") : "",
                          info.param.old_ps, "to", info.param.new_ps);
    });

// A ps that has noted no changes since the base (here: a base it never
// wrote; in a job, a ps restarted or restored since) cannot save
// incrementally: the save is a full one, and the next incremental one is on
// it.
TEST(IncrementalCheckpointFallbackTest, UnknownBase_SavesAFullCheckpoint) {
  const std::string root = absl::StrCat(::testing::TempDir(), "/incremental_fallback_", getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  const proto::TrainingConfig training = Training(2, proto::MOD, 0);
  Cluster cluster(training, 2, nullptr, root);
  Chief chief(cluster, training, root);
  std::vector<int64_t> ids = {1, 2, 3, 40, 50};
  cluster.Step(0, ids, 1);
  absl::StatusOr<chief::SaveFigures> saved = chief.Save(1, common::CheckpointDirName(0));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_FALSE(saved->incremental);
  EXPECT_TRUE(common::ReadManifest(root + "/" + saved->name)->base().empty());
  cluster.Step(1, {2}, 2);
  absl::StatusOr<chief::SaveFigures> next = chief.Save(2, saved->name);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->incremental);
  EXPECT_EQ(LinkRows(root + "/" + next->name, kDeepEmbedding).first, 1);
  fs::remove_all(root);
}

}  // namespace
}  // namespace pst::testing
