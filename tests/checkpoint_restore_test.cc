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
#include "models/model_spec.h"
#include "models/wide_deep_model.h"
#include "ps_server/in_process_transport.h"
#include "common/shard_reader.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/store_restorer.h"

namespace pst::models {
namespace {

constexpr int64_t kBuckets = 20;  // 26 fields x 20 = 520 rows per table

// `capacity` > 0: hash tables keep at most that many rows a ps in memory.
proto::TrainingConfig Training(int shards, proto::Routing routing, int64_t buckets,
                               int64_t capacity = 0) {
  proto::TrainingConfig training;
  training.set_model("wide_deep");
  training.add_hidden_units(8);
  training.set_embedding_dim(4);
  training.set_buckets_per_field(buckets);
  training.set_seed(3);
  training.mutable_optimizer()->set_name("adam");
  training.mutable_optimizer()->set_learning_rate(0.01f);
  training.mutable_optimizer()->set_beta1(0.9f);
  training.mutable_optimizer()->set_beta2(0.999f);
  training.mutable_optimizer()->set_epsilon(1e-7f);
  training.mutable_partitioner()->set_kind("fixed");
  training.mutable_partitioner()->set_num_shards(shards);
  training.set_routing(routing);
  training.set_placement("size_balanced");
  if (capacity > 0) {
    training.set_table_capacity(capacity);
    training.set_table_eviction("lru");
  }
  return training;
}

struct Cluster {
  std::shared_ptr<ps::InProcessPsTransport> transport;
  std::unique_ptr<client::PsClient> client;

  // `disk`: the ps's disk tier, or null.
  Cluster(const proto::TrainingConfig& training, int num_ps,
          std::shared_ptr<ps::DiskTier> disk = nullptr) {
    ps::InProcessPs::Options options;
    options.store.disk_tier = std::move(disk);
    transport = std::make_shared<ps::InProcessPsTransport>(
        std::make_shared<ps::InProcessPs>(num_ps, options));
    const proto::PlacementPlan plan = *BuildPlan(training, num_ps);
    for (int p = 0; p < num_ps; ++p) {
      proto::CreateVariablesRequest request;
      *request.mutable_optimizer() = training.optimizer();
      for (const auto& entry : plan.variables()) {
        if (entry.ps_index() == p) *request.add_variables() = entry.spec();
      }
      EXPECT_TRUE(transport->store(p)->Create(request).ok());
    }
    client =
        *client::PsClient::Create(plan, DenseNames(*ModelVariables(training)), transport, 0, 9);
  }

  // One training-like step: random gradients for every dense variable and
  // for the rows of `ids` in both tables.
  void Step(int64_t step, const std::vector<int64_t>& ids, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0, 1);
    client::Values values, grads;
    ASSERT_TRUE(client->Pull(&values).ok());
    for (const auto& v : values) {
      grads.emplace_back(v.size());
      for (float& x : grads.back()) x = g(rng);
    }
    ASSERT_TRUE(client->PushPull(step, step, grads, &values).ok());
    std::vector<client::PsClient::TableIds> tables = {{kDeepEmbedding, ids}, {kWideEmbedding, ids}};
    client::Values row_grads(2);
    row_grads[0].resize(ids.size() * 4);
    row_grads[1].resize(ids.size());
    for (auto& r : row_grads) {
      for (float& x : r) x = g(rng);
    }
    ASSERT_TRUE(client->PushRows(step, tables, row_grads).ok());
  }

  // Rows the ps hold of the hash tables in memory, and on disk.
  std::pair<int64_t, int64_t> HashRows() {
    int64_t memory = 0, disk = 0;
    for (int p = 0; p < transport->num_ps(); ++p) {
      const ps::VariableStore::Stats stats = transport->store(p)->GetStats();
      memory += stats.hash_rows;
      disk += stats.AllTables().rows_on_disk;
    }
    return {memory, disk};
  }

  // Every parameter, as bytes: the dense variables and the rows of `ids`.
  std::vector<float> All(const std::vector<int64_t>& ids) {
    client::Values dense, rows;
    EXPECT_TRUE(client->Pull(&dense).ok());
    std::vector<client::PsClient::TableIds> tables = {{kDeepEmbedding, ids}, {kWideEmbedding, ids}};
    EXPECT_TRUE(client->PullRows(tables, &rows).ok());
    std::vector<float> all;
    for (const auto& v : dense) all.insert(all.end(), v.begin(), v.end());
    for (const auto& v : rows) all.insert(all.end(), v.begin(), v.end());
    return all;
  }
};

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
