// A wide_deep model's variables on in-process ps, driven by hand: the
// stores a checkpoint test saves and restores (tests of checkpoints onto
// another number of ps, and of incremental ones). Random gradients, so
// that every parameter and optimizer slot moves.
#ifndef PST_TESTS_WIDE_DEEP_STORES_H_
#define PST_TESTS_WIDE_DEEP_STORES_H_

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client/ps_client.h"
#include "models/model_spec.h"
#include "models/wide_deep_model.h"
#include "ps_server/in_process_ps.h"
#include "ps_server/in_process_transport.h"
#include "ps_server/store/disk_tier.h"

namespace pst::testing {

using models::BuildPlan;
using models::DenseNames;
using models::kDeepEmbedding;
using models::kWideEmbedding;
using models::ModelVariables;

constexpr int64_t kBuckets = 20;  // 26 fields x 20 = 520 rows per table

// `capacity` > 0: hash tables keep at most that many rows a ps in memory.
inline proto::TrainingConfig Training(int shards, proto::Routing routing, int64_t buckets,
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
  std::shared_ptr<ps::InProcessPs> ps;
  std::shared_ptr<ps::InProcessPsTransport> transport;
  std::unique_ptr<client::PsClient> client;

  // `disk`: the ps's disk tier, or null; `checkpoint_dir`: where the ps
  // save and restore ("": they refuse to).
  Cluster(const proto::TrainingConfig& training, int num_ps,
          std::shared_ptr<ps::DiskTier> disk = nullptr, const std::string& checkpoint_dir = "") {
    ps::InProcessPs::Options options;
    options.store.disk_tier = std::move(disk);
    options.checkpoint_dir = checkpoint_dir;
    ps = std::make_shared<ps::InProcessPs>(num_ps, options);
    transport = std::make_shared<ps::InProcessPsTransport>(ps);
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
  // `dense` false: the rows only.
  void Step(int64_t step, const std::vector<int64_t>& ids, uint32_t seed, bool dense = true) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0, 1);
    client::Values values, grads;
    ASSERT_TRUE(client->Pull(&values).ok());
    for (const auto& v : values) {
      grads.emplace_back(v.size());
      for (float& x : grads.back()) x = g(rng);
    }
    if (dense) {
      ASSERT_TRUE(client->PushPull(step, step, grads, &values).ok());
    }
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

}  // namespace pst::testing

#endif  // PST_TESTS_WIDE_DEEP_STORES_H_
