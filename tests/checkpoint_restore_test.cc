// Checkpoints written by one cluster and restored onto a cluster with a
// different number of ps (and a different partitioning) hold bit-identical
// parameters and optimizer state. In-process stores, real shard files; hash
// tables also bounded with a disk tier (RocksDB) holding most of their rows,
// on both sides of the restore.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "common/checkpoint_format.h"
#include "common/shard_reader.h"
#include "models/model_spec.h"
#include "models/wide_deep_model.h"
#include "ps_server/in_process_transport.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/store_restorer.h"
#include "tests/wide_deep_stores.h"

namespace pst::models {
namespace {

using testing::Cluster;
using testing::kBuckets;
using testing::Training;

struct RestoreCase {
  int64_t buckets;  // 0: hash embeddings
  int old_ps, new_ps;
  int64_t capacity = 0;  // hash: rows a table keeps in memory a ps, the rest on disk
};

class CheckpointRestoreTest : public ::testing::TestWithParam<RestoreCase> {};

TEST_P(CheckpointRestoreTest, OntoAnotherNumberOfPs_IsBitIdentical) {
  const RestoreCase c = GetParam();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/restore_", getpid(), "_", c.buckets,
                                       "_", c.old_ps, "_", c.new_ps);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 26 * kBuckets; i += 3) ids.push_back(c.buckets > 0 ? i : i * 7919 + 1);

  std::shared_ptr<ps::DiskTier> disk;
  if (c.capacity > 0) {
    ps::DiskTier::Options options;
    options.block_cache_bytes = options.write_buffer_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<ps::DiskTier>> opened =
        ps::DiskTier::Open(dir + "/tables", options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    disk = *std::move(opened);
  }

  // Train a few steps on the old cluster, then save each ps's shard.
  Cluster old_cluster(Training(c.old_ps, proto::MOD, c.buckets, c.capacity), c.old_ps, disk);
  for (int step = 0; step < 5; ++step) old_cluster.Step(step, ids, 100 + step);
  if (c.capacity > 0) {
    // Most rows are on disk, and the same steps with every row in memory
    // end with the same parameters: the disk tier loses nothing.
    const auto [memory, on_disk] = old_cluster.HashRows();
    EXPECT_LE(memory, 2 * c.capacity * c.old_ps);
    EXPECT_GT(on_disk, 2 * memory) << "most rows went to disk";
    Cluster in_memory(Training(c.old_ps, proto::MOD, c.buckets), c.old_ps);
    for (int step = 0; step < 5; ++step) in_memory.Step(step, ids, 100 + step);
    EXPECT_EQ(old_cluster.All(ids), in_memory.All(ids));
  }
  proto::CheckpointManifest manifest;
  for (int p = 0; p < c.old_ps; ++p) {
    proto::CheckpointShard* shard = manifest.add_shards();
    ASSERT_TRUE(common::WriteShardFile(absl::StrCat(dir, "/", common::ShardFileName(p, c.old_ps)),
                                       old_cluster.transport->store(p)->Snapshot(), shard)
                    .ok());
  }
  ASSERT_TRUE(common::WriteManifest(dir, manifest).ok());

  // A new cluster, another number of ps and 'div' routing, restored.
  Cluster new_cluster(Training(c.new_ps, proto::DIV, c.buckets, c.capacity), c.new_ps, disk);
  if (c.capacity > 0) {
    // As a ps restores (PsNode::RestoreFrom): each shard file read in turn,
    // a table that keeps rows on disk row by row, never whole.
    for (int p = 0; p < c.new_ps; ++p) {
      std::unique_ptr<ps::StoreRestorer> restorer =
          new_cluster.transport->store(p)->BeginRestore();
      ps::StoreRestorer* restorers[] = {restorer.get()};
      for (const auto& shard : manifest.shards()) {
        auto reader = common::ShardReader::Open(absl::StrCat(dir, "/", shard.file()));
        ASSERT_TRUE(reader.ok()) << reader.status();
        absl::Status absorbed = ps::AbsorbShard(**reader, restorers);
        ASSERT_TRUE(absorbed.ok()) << absorbed;
      }
      absl::Status restored = restorer->Commit(0);
      ASSERT_TRUE(restored.ok()) << restored;
    }
  } else {
    std::vector<std::vector<common::ShardRecord>> shards;
    for (const auto& shard : manifest.shards()) {
      shards.push_back(*common::ReadShardFile(absl::StrCat(dir, "/", shard.file())));
    }
    std::vector<const common::ShardRecord*> records;
    for (const auto& s : shards) {
      for (const auto& r : s) records.push_back(&r);
    }
    for (int p = 0; p < c.new_ps; ++p) {
      absl::Status restored = new_cluster.transport->store(p)->Restore(records);
      ASSERT_TRUE(restored.ok()) << restored;
    }
  }
  EXPECT_EQ(new_cluster.All(ids), old_cluster.All(ids));
  if (c.capacity > 0) {
    EXPECT_GT(new_cluster.HashRows().second, 0) << "the restore put rows past the capacity on disk";
  }

  // The optimizer state came along: one more identical step stays identical.
  old_cluster.Step(5, ids, 999);
  new_cluster.Step(5, ids, 999);
  EXPECT_EQ(new_cluster.All(ids), old_cluster.All(ids));
  client::Values dense;
  EXPECT_EQ(*new_cluster.client->Pull(&dense), 6) << "versions restored";
}

INSTANTIATE_TEST_SUITE_P(Layouts, CheckpointRestoreTest,
                         ::testing::Values(RestoreCase{kBuckets, 2, 3}, RestoreCase{kBuckets, 3, 1},
                                           RestoreCase{0, 2, 3}, RestoreCase{0, 2, 1, 20},
                                           RestoreCase{0, 2, 3, 20}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.buckets > 0 ? "Tables" : "Hash",
                                               info.param.capacity > 0 ? "OnDisk" : "",
                                               info.param.old_ps, "to", info.param.new_ps);
                         });

TEST(CheckpointRestoreErrorTest, MissingVariable_IsFailedPrecondition_AndChangesNothing) {
  Cluster cluster(Training(2, proto::MOD, kBuckets), 2);
  std::vector<const common::ShardRecord*> none;
  absl::Status status = cluster.transport->store(0)->Restore(none);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(status.message()).find("has no variable"), std::string::npos) << status;
}

}  // namespace
}  // namespace pst::models
