// SYNC mode with an embedding table, end to end through PsClient and real
// VariableStores behind the in-process transport: logreg's hash table
// (--buckets=0) and bias, trained by W synchronous workers with batch B,
// end with the parameters of one process trained on the combined batch of
// W*B; with a backup worker (quorum 1 of 2) a late push is dropped, rows and
// dense alike, and the step is the first worker's alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "absl/container/btree_set.h"
#include "client/ps_client.h"
#include "common/classifier_metrics.h"
#include "common/partition.h"
#include "models/model_spec.h"
#include "ps_server/in_process_transport.h"

namespace pst::models {
namespace {

constexpr int kBatch = 6;
constexpr int kSteps = 10;
constexpr int kFeatures = 4;  // per example
constexpr char kTable[] = "logreg/weights";

proto::TrainingConfig Training(proto::SyncMode mode, int workers, int replicas = 0) {
  proto::TrainingConfig training;
  training.set_model("logreg");
  training.set_buckets(0);  // a hash table
  training.set_seed(3);
  training.mutable_optimizer()->set_name("adagrad");
  training.mutable_optimizer()->set_learning_rate(0.5f);
  training.mutable_optimizer()->set_initial_accumulator(0.1f);
  training.mutable_sync()->set_mode(mode);
  training.mutable_sync()->set_num_workers(workers);
  training.mutable_sync()->set_replicas_to_aggregate(replicas);
  return training;
}

// Examples of kFeatures ids each, drawn from a few dozen ids spread over the
// int64 range (hash ids), with values and labels.
struct Data {
  std::vector<int64_t> ids;
  std::vector<float> values, labels;
  explicit Data(int examples) {
    std::mt19937_64 rng(17);
    std::vector<int64_t> vocab;
    for (int i = 0; i < 40; ++i) vocab.push_back(static_cast<int64_t>(rng() >> 1) - (1LL << 61));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (int e = 0; e < examples; ++e) {
      absl::btree_set<int64_t> picked;
      while (static_cast<int>(picked.size()) < kFeatures) picked.insert(vocab[rng() % 12 + e % 28]);
      for (int64_t id : picked) {
        ids.push_back(id);
        values.push_back(u(rng));
      }
      labels.push_back(static_cast<float>(rng() % 2));
    }
  }
  std::vector<int64_t> AllIds() const {
    absl::btree_set<int64_t> all(ids.begin(), ids.end());
    return {all.begin(), all.end()};
  }
};

// Logistic regression's gradients over examples [first, first + n), as
// means over the batch: the bias's, and one row per id of `batch_ids`.
struct Step {
  std::vector<int64_t> batch_ids;
  std::vector<float> row_grads, bias_grad;
};
Step Gradients(const Data& data, int first, int n, const std::vector<float>& rows, float bias,
               const std::vector<int64_t>& ids) {
  Step step;
  step.batch_ids = ids;
  step.row_grads.assign(ids.size(), 0.0f);
  step.bias_grad.assign(1, 0.0f);
  auto slot = [&](int64_t id) {
    return std::lower_bound(ids.begin(), ids.end(), id) - ids.begin();
  };
  for (int e = first; e < first + n; ++e) {
    float z = bias;
    for (int k = e * kFeatures; k < (e + 1) * kFeatures; ++k) {
      z += rows[slot(data.ids[k])] * data.values[k];
    }
    const float dz = (common::Sigmoid(z) - data.labels[e]) / static_cast<float>(n);
    step.bias_grad[0] += dz;
    for (int k = e * kFeatures; k < (e + 1) * kFeatures; ++k) {
      step.row_grads[slot(data.ids[k])] += dz * data.values[k];
    }
  }
  return step;
}

std::vector<int64_t> BatchIds(const Data& data, int first, int n) {
  absl::btree_set<int64_t> ids(data.ids.begin() + first * kFeatures,
                               data.ids.begin() + (first + n) * kFeatures);
  return {ids.begin(), ids.end()};
}

// A cluster of `num_ps` in-process ps holding logreg's variables.
struct Cluster {
  std::shared_ptr<ps::InProcessPsTransport> transport;
  std::vector<std::string> names;
  proto::PlacementPlan plan;
  bool sync = false;

  Cluster(const proto::TrainingConfig& training, int num_ps) {
    transport = std::make_shared<ps::InProcessPsTransport>(num_ps);
    plan = *BuildPlan(training, num_ps);
    names = DenseNames(*ModelVariables(training));
    sync = training.sync().mode() == proto::SYNC;
    for (int p = 0; p < num_ps; ++p) {
      proto::CreateVariablesRequest request;
      *request.mutable_optimizer() = training.optimizer();
      *request.mutable_sync() = training.sync();
      for (const auto& entry : plan.variables()) {
        if (entry.ps_index() == p) *request.add_variables() = entry.spec();
      }
      EXPECT_TRUE(transport->store(p)->Create(request).ok());
    }
  }
  std::unique_ptr<client::PsClient> Client(int worker) {
    std::unique_ptr<client::PsClient> client =
        *client::PsClient::Create(plan, names, transport, worker, /*incarnation=*/100 + worker);
    client->set_sync(sync);
    return client;
  }
  // The bias, then the table's rows of `ids`.
  std::vector<float> Parameters(const std::vector<int64_t>& ids) {
    std::unique_ptr<client::PsClient> client = Client(0);
    client::Values dense, rows;
    EXPECT_TRUE(client->Pull(&dense).ok());
    const client::PsClient::TableIds tables[] = {{kTable, ids}};
    EXPECT_TRUE(client->PullRows(tables, &rows).ok());
    std::vector<float> out = dense[0];
    out.insert(out.end(), rows[0].begin(), rows[0].end());
    return out;
  }
};

// One worker's step: pull its rows, compute, push rows then dense, tagged
// with `version` (SYNC) and answered once the step is applied. Returns the
// version after.
int64_t RunStep(client::PsClient& client, const Data& data, int first, int n, int64_t version,
                client::Values* params) {
  const std::vector<int64_t> ids = BatchIds(data, first, n);
  const client::PsClient::TableIds tables[] = {{kTable, ids}};
  client::Values rows;
  EXPECT_TRUE(client.PullRows(tables, &rows).ok());
  const Step step = Gradients(data, first, n, rows[0], (*params)[0][0], ids);
  EXPECT_TRUE(client.PushRows(version, tables, client::Values{step.row_grads}).ok());
  absl::StatusOr<int64_t> next =
      client.PushPull(version, version, client::Values{step.bias_grad}, params);
  EXPECT_TRUE(next.ok()) << next.status();
  return next.ok() ? *next : -1;
}

// Parameters after kSteps synchronous steps of `workers` workers, worker i
// taking examples [k*W*B + i*B, +B) at step k.
std::vector<float> TrainSync(int workers, const Data& data) {
  Cluster cluster(Training(proto::SYNC, workers), 2);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::unique_ptr<client::PsClient> client = cluster.Client(w);
      client::Values params;
      int64_t version = *client->Pull(&params);
      for (int k = 0; k < kSteps; ++k) {
        const int64_t next =
            RunStep(*client, data, (k * workers + w) * kBatch, kBatch, version, &params);
        ASSERT_EQ(next, version + 1) << "a sync step moves every variable by one version";
        version = next;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int p = 0; p < 2; ++p) {
    ps::VariableStore::Cut cut;
    cluster.transport->store(p)->Snapshot(nullptr, &cut);
    EXPECT_EQ(cut.max_version, kSteps) << "ps " << p;
    EXPECT_FALSE(cut.sync_pending) << "ps " << p;
  }
  return cluster.Parameters(data.AllIds());
}

// The same steps in one process with batch W*B.
std::vector<float> TrainSingle(int workers, const Data& data) {
  Cluster cluster(Training(proto::ASYNC, 1), 1);
  std::unique_ptr<client::PsClient> client = cluster.Client(0);
  client::Values params;
  int64_t version = *client->Pull(&params);
  for (int k = 0; k < kSteps; ++k) {
    version = RunStep(*client, data, k * workers * kBatch, workers * kBatch, version, &params);
  }
  return cluster.Parameters(data.AllIds());
}

class SyncTableEquivalenceTest : public ::testing::TestWithParam<int> {};

TEST_P(SyncTableEquivalenceTest, SyncWorkers_MatchOneProcessWithTheCombinedBatch) {
  const int workers = GetParam();
  const Data data(kSteps * workers * kBatch);
  const std::vector<float> sync = TrainSync(workers, data);
  const std::vector<float> single = TrainSingle(workers, data);
  const std::vector<float> initial =
      Cluster(Training(proto::ASYNC, 1), 1).Parameters(data.AllIds());
  ASSERT_EQ(sync.size(), single.size());
  ASSERT_EQ(sync.size(), initial.size());
  double max_diff = 0, max_change = 0;
  for (size_t k = 0; k < sync.size(); ++k) {
    max_diff = std::max<double>(max_diff, std::abs(sync[k] - single[k]));
    max_change = std::max<double>(max_change, std::abs(single[k] - initial[k]));
  }
  EXPECT_LT(max_diff, 1e-6) << workers << " workers";
  EXPECT_GT(max_change, 1e-2) << "training moved the parameters";
}

INSTANTIATE_TEST_SUITE_P(Workers, SyncTableEquivalenceTest, ::testing::Values(2, 3));

// Quorum 1 of 2: worker 1's step is applied alone; worker 0's late step
// (computed from the same values) is dropped as stale on every ps, rows
// and dense, and a retry of worker 1's push changes nothing either. The
// result is one process's step on worker 1's batch.
TEST(SyncTableBackupTest, QuorumOneOfTwo_LateWorkersRowsAreDropped) {
  const Data data(2 * kBatch);
  Cluster cluster(Training(proto::SYNC, 2, /*replicas=*/1), 2);
  std::unique_ptr<client::PsClient> fast = cluster.Client(1);
  std::unique_ptr<client::PsClient> late = cluster.Client(0);
  client::Values fast_params, late_params;
  ASSERT_EQ(*fast->Pull(&fast_params), 0);
  ASSERT_EQ(*late->Pull(&late_params), 0);
  // Both compute step 0 from version 0; the late worker's ids overlap the
  // fast one's, so its rows, were they summed, would change the result.
  const std::vector<int64_t> late_ids = BatchIds(data, 0, kBatch);
  const std::vector<int64_t> fast_ids = BatchIds(data, kBatch, kBatch);
  std::vector<int64_t> both;
  std::set_intersection(late_ids.begin(), late_ids.end(), fast_ids.begin(), fast_ids.end(),
                        std::back_inserter(both));
  ASSERT_FALSE(both.empty());
  const client::PsClient::TableIds late_tables[] = {{kTable, late_ids}};
  client::Values late_rows;
  ASSERT_TRUE(late->PullRows(late_tables, &late_rows).ok());
  const Step late_step = Gradients(data, 0, kBatch, late_rows[0], late_params[0][0], late_ids);
  ASSERT_EQ(RunStep(*fast, data, kBatch, kBatch, 0, &fast_params), 1);
  ASSERT_TRUE(late->PushRows(0, late_tables, client::Values{late_step.row_grads}).ok());
  ASSERT_EQ(*late->PushPull(0, 0, client::Values{late_step.bias_grad}, &late_params), 1)
      << "answered with the step applied";
  int64_t stale = 0;
  for (int p = 0; p < 2; ++p) stale += cluster.transport->store(p)->GetStats().stale_dropped;
  EXPECT_GE(stale, 3) << "the late row push on both ps and its dense push";
  const std::vector<float> got = cluster.Parameters(data.AllIds());

  Cluster single(Training(proto::ASYNC, 1), 1);
  std::unique_ptr<client::PsClient> one = single.Client(0);
  client::Values params;
  ASSERT_EQ(*one->Pull(&params), 0);
  RunStep(*one, data, kBatch, kBatch, 0, &params);
  const std::vector<float> want = single.Parameters(data.AllIds());
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
}

// Each partition divides a step's sum by the pushes it heard of, so every
// push must reach every partition: a push whose ids all fall in one
// partition still moves the others' versions with the step.
TEST(SyncTablePushTest, PushWithIdsInOnePartition_ReachesEveryPartition) {
  Cluster cluster(Training(proto::SYNC, 2), 2);
  std::vector<const proto::PlacementPlan::Entry*> parts;
  for (const auto& entry : cluster.plan.variables()) {
    if (entry.spec().variable() == kTable) parts.push_back(&entry);
  }
  ASSERT_GE(parts.size(), 2u);
  const int num_partitions = parts[0]->spec().num_partitions();
  // An id of partition 0.
  int64_t id = 0;
  while (common::HashPartition(id, num_partitions) != 0) ++id;
  const std::vector<int64_t> ids = {id};
  const client::PsClient::TableIds tables[] = {{kTable, ids}};
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(cluster.Client(w)->PushRows(0, tables, client::Values{{1.0f}}).ok());
  }
  for (const proto::PlacementPlan::Entry* part : parts) {
    int64_t probe = 0;
    while (common::HashPartition(probe, num_partitions) != part->spec().partition()) ++probe;
    proto::PullRowsRequest pull;
    pull.add_rows()->set_name(part->spec().name());
    pull.mutable_rows(0)->add_ids(probe);
    proto::PullRowsResponse response;
    ASSERT_TRUE(cluster.transport->store(part->ps_index())->PullRows(pull, &response).ok());
    EXPECT_EQ(response.versions(0), 1) << part->spec().name() << " missed the step";
  }
}

}  // namespace
}  // namespace pst::models
