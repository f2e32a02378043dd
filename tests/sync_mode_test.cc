// The training modes, end to end through PsClient and real VariableStores
// behind the in-process transport (no network): a synchronous run of W
// workers with batch B is the same computation as one process with batch
// W*B; retried pushes are applied once in every mode.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "client/ps_client.h"
#include "common/placement.h"
#include "device/device_mapping.h"
#include "models/mlp.h"
#include "models/model_spec.h"
#include "ps_server/in_process_transport.h"
#include "models/mlp_model.h"

namespace pst::models {
namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 12;

proto::TrainingConfig Training(proto::SyncMode mode, int workers) {
  proto::TrainingConfig training;
  training.set_model("mlp");
  training.add_hidden_units(16);
  training.set_seed(11);
  training.mutable_optimizer()->set_name("sgd");
  training.mutable_optimizer()->set_learning_rate(0.1f);
  training.mutable_sync()->set_mode(mode);
  training.mutable_sync()->set_num_workers(workers);
  training.mutable_sync()->set_staleness(1);
  return training;
}

// Random inputs and labels, enough for every step of every worker.
struct Data {
  std::vector<float> x;
  std::vector<int32_t> y;
  explicit Data(int examples) : x(static_cast<size_t>(examples) * kFashionMnistDim) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0, 1);
    for (float& v : x) v = u(rng);
    for (int i = 0; i < examples; ++i) y.push_back(static_cast<int32_t>(rng() % 10));
  }
};

// A cluster of `num_ps` in-process ps holding the model's variables.
struct Cluster {
  std::shared_ptr<ps::InProcessPsTransport> transport;
  std::vector<std::string> names;
  proto::PlacementPlan plan;

  Cluster(const proto::TrainingConfig& training, int num_ps) {
    transport = std::make_shared<ps::InProcessPsTransport>(num_ps);
    plan = *BuildPlan(training, num_ps);
    names = DenseNames(*ModelVariables(training));
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
    return *client::PsClient::Create(plan, names, transport, worker, /*incarnation=*/100 + worker);
  }
};

// Parameters after kSteps synchronous steps of `workers` workers, worker i
// taking examples [k*W*B + i*B, +B) at step k.
client::Values TrainSync(int workers, const Data& data) {
  const proto::TrainingConfig training = Training(proto::SYNC, workers);
  Cluster cluster(training, 2);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::unique_ptr<client::PsClient> client = cluster.Client(w);
      Mlp model(*MlpConfigFor(training));
      client::Values params, grads;
      int64_t version = *client->Pull(&params);
      for (int k = 0; k < kSteps; ++k) {
        const size_t first = static_cast<size_t>(k * workers + w) * kBatch;
        ASSERT_TRUE(model
                        .LossAndGradients(params, &data.x[first * kFashionMnistDim], &data.y[first],
                                          kBatch, &grads)
                        .ok());
        absl::StatusOr<int64_t> next = client->PushPull(version, version, grads, &params);
        ASSERT_TRUE(next.ok()) << next.status();
        ASSERT_EQ(*next, version + 1) << "a sync step moves every variable by one version";
        version = *next;
      }
    });
  }
  for (auto& t : threads) t.join();
  client::Values params;
  EXPECT_EQ(*cluster.Client(0)->Pull(&params), kSteps);
  return params;
}

// The same steps in one process with batch W*B.
client::Values TrainSingle(int workers, const Data& data) {
  const proto::TrainingConfig training = Training(proto::ASYNC, 1);
  Cluster cluster(training, 1);
  std::unique_ptr<client::PsClient> client = cluster.Client(0);
  Mlp model(*MlpConfigFor(training));
  client::Values params, grads;
  int64_t version = *client->Pull(&params);
  for (int k = 0; k < kSteps; ++k) {
    const size_t first = static_cast<size_t>(k * workers) * kBatch;
    EXPECT_TRUE(model
                    .LossAndGradients(params, &data.x[first * kFashionMnistDim], &data.y[first],
                                      kBatch * workers, &grads)
                    .ok());
    version = *client->PushPull(k, version, grads, &params);
  }
  return params;
}

class SyncEquivalenceTest : public ::testing::TestWithParam<int> {};

TEST_P(SyncEquivalenceTest, SyncWorkers_MatchOneProcessWithTheCombinedBatch) {
  const int workers = GetParam();
  const Data data(kSteps * workers * kBatch);
  const client::Values sync = TrainSync(workers, data);
  const client::Values single = TrainSingle(workers, data);
  ASSERT_EQ(sync.size(), single.size());
  double max_diff = 0, max_change = 0;
  const client::Values initial = [&] {
    Cluster fresh(Training(proto::ASYNC, 1), 1);
    client::Values v;
    fresh.Client(0)->Pull(&v).IgnoreError();
    return v;
  }();
  for (size_t i = 0; i < sync.size(); ++i) {
    ASSERT_EQ(sync[i].size(), single[i].size());
    for (size_t k = 0; k < sync[i].size(); ++k) {
      max_diff = std::max<double>(max_diff, std::abs(sync[i][k] - single[i][k]));
      max_change = std::max<double>(max_change, std::abs(single[i][k] - initial[i][k]));
    }
  }
  EXPECT_LT(max_diff, 1e-5) << workers << " workers";
  EXPECT_GT(max_change, 1e-2) << "training moved the parameters";
}

INSTANTIATE_TEST_SUITE_P(Workers, SyncEquivalenceTest, ::testing::Values(2, 3));

// Sends the same push twice, as a retry after a lost answer would.
class ExactlyOnceTest : public ::testing::TestWithParam<proto::SyncMode> {};

TEST_P(ExactlyOnceTest, RetriedPush_IsAppliedOnce) {
  const proto::TrainingConfig training = Training(GetParam(), 1);
  Cluster cluster(training, 1);
  std::unique_ptr<client::PsClient> client = cluster.Client(0);
  client::Values before, after_once, after_twice, grads;
  ASSERT_EQ(*client->Pull(&before), 0);
  for (const auto& v : before) grads.emplace_back(v.size(), 0.5f);
  ASSERT_EQ(*client->PushPull(0, 0, grads, &after_once), 1);
  ASSERT_EQ(*client->PushPull(0, 0, grads, &after_twice), 1) << "the retry did not apply again";
  EXPECT_EQ(after_once, after_twice);
  EXPECT_NE(after_once, before);
  const ps::VariableStore::Stats stats = cluster.transport->store(0)->GetStats();
  EXPECT_EQ(stats.gradients_applied, 1);
  EXPECT_EQ(GetParam() == proto::SYNC ? stats.stale_dropped : stats.duplicates_ignored, 1);
  // The next step is applied as usual.
  ASSERT_EQ(*client->PushPull(1, 1, grads, &after_twice), 2);
}

INSTANTIATE_TEST_SUITE_P(Modes, ExactlyOnceTest,
                         ::testing::Values(proto::ASYNC, proto::SYNC, proto::SSP),
                         [](const auto& info) { return proto::SyncMode_Name(info.param); });

// SSP: a worker may not get more than `staleness` steps ahead of the
// slowest active worker; leaving releases the others.
TEST(SspTest, FastWorker_WaitsForTheSlowest_AndIsReleasedWhenItLeaves) {
  proto::TrainingConfig training = Training(proto::SSP, 2);
  Cluster cluster(training, 1);
  ps::VariableStore* store = cluster.transport->store(0);
  std::unique_ptr<client::PsClient> fast = cluster.Client(0);
  client::Values params, grads;
  ASSERT_TRUE(fast->Pull(&params).ok());
  for (const auto& v : params) grads.emplace_back(v.size(), 0.0f);
  // Staleness 1: clocks 1 and 2 are fine while the slow worker is at 0...
  ASSERT_TRUE(fast->PushPull(0, 0, grads, &params).ok());
  // ...but a pull at clock 2 would be 2 ahead: it parks.
  // Worker 0's next step (clock 1 -> 2), zero gradients for every variable.
  proto::PullResponse current;
  ASSERT_TRUE(store->Pull({}, &current).ok());
  proto::PushPullRequest push;
  push.mutable_push()->set_worker_index(0);
  push.mutable_push()->set_incarnation(100);
  push.mutable_push()->set_step(1);
  for (int i = 0; i < current.values_size(); ++i) {
    push.mutable_push()->add_names(current.names(i));
    proto::Tensor* g = push.mutable_push()->add_gradients();
    *g = current.values(i);
    std::fill(g->mutable_data()->begin(), g->mutable_data()->end(), 0);
  }
  proto::PullResponse response;
  absl::Notification released;
  absl::Status result;
  const uint64_t ticket = store->PushPullWhenReady(&push, &response, [&](absl::Status s) {
    result = s;
    released.Notify();
  });
  EXPECT_NE(ticket, 0u) << "clock 2 with the slowest at 0 and staleness 1 must wait";
  EXPECT_FALSE(released.HasBeenNotified());
  EXPECT_EQ(store->GetStats().parked_pulls, 1);
  // The slow worker leaves: the fast one goes on.
  proto::MembershipRequest membership;
  membership.add_active_workers(0);
  membership.set_replicas_to_aggregate(1);
  ASSERT_TRUE(store->SetMembership(membership).ok());
  ASSERT_TRUE(released.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_LE(store->GetStats().max_clock_gap, 1);
}

// SYNC: a quorum that cannot be met any more (a worker left) is lowered,
// and the waiting step completes.
TEST(SyncQuorumTest, WorkerLeaving_LowersQuorum_AndReleasesTheStep) {
  proto::TrainingConfig training = Training(proto::SYNC, 2);
  Cluster cluster(training, 1);
  std::unique_ptr<client::PsClient> client = cluster.Client(0);
  client::Values params, grads;
  ASSERT_TRUE(client->Pull(&params).ok());
  for (const auto& v : params) grads.emplace_back(v.size(), 1.0f);
  absl::StatusOr<int64_t> version;
  std::thread stepper([&] { version = client->PushPull(0, 0, grads, &params); });
  // Worker 1 never pushes; the chief says it left.
  proto::MembershipRequest membership;
  membership.add_active_workers(0);
  membership.set_replicas_to_aggregate(2);
  ASSERT_TRUE(cluster.transport->store(0)->SetMembership(membership).ok());
  stepper.join();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1);
}

// Async with --overlap: batch b's gradient is computed while batch b-1's
// push+pull is in flight, i.e. from the values batch b-2's answer brought.
// With every example alike, batch order does not matter, so the expected
// values can be computed here step by step: g_0 = grad(p_0), and
// g_b = grad(p_{b-1}) for b >= 1, with p_{b+1} = p_b - lr * g_b.
// SSP overlaps as ASYNC does (one worker: no clock to wait for).
class OverlapTest : public ::testing::TestWithParam<proto::SyncMode> {};

TEST_P(OverlapTest, EveryBatchIsPushedOnce_FromTheValuesOneStepBehind) {
  proto::TrainingConfig training = Training(GetParam(), 1);
  training.set_batch_size(kBatch);
  training.set_epochs(2);
  training.set_overlap(true);
  constexpr int kExamples = 5 * kBatch;  // 5 batches per epoch, 10 in all
  data::Dataset data;
  data.num_examples = kExamples;
  data.dim = kFashionMnistDim;
  const Data one(1);
  for (int i = 0; i < kExamples; ++i) {
    data.features.insert(data.features.end(), one.x.begin(), one.x.end());
    data.labels.push_back(one.y[0]);
  }
  Cluster cluster(training, 2);
  std::unique_ptr<client::PsClient> client = cluster.Client(0);
  client::Values initial;
  ASSERT_EQ(*client->Pull(&initial), 0);

  StepTimes times;
  LoopControl control;
  control.times = &times;
  std::vector<int64_t> positions, versions;
  control.on_step = [&](int64_t examples, float, int, int64_t version, int64_t position) {
    EXPECT_EQ(examples, kBatch);
    positions.push_back(position);
    versions.push_back(version);
  };
  absl::StatusOr<int64_t> global_step = TrainMlp(training, data, 3, client.get(), control);
  ASSERT_TRUE(global_step.ok()) << global_step.status();
  EXPECT_EQ(*global_step, 10);
  EXPECT_EQ(positions, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(versions, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(times.steps, 10);
  EXPECT_GT(times.compute, absl::ZeroDuration());
  EXPECT_GT(times.communication, absl::ZeroDuration());

  Mlp model(*MlpConfigFor(training));
  const float lr = training.optimizer().learning_rate();
  std::vector<client::Values> p = {initial};
  for (int b = 0; b < 10; ++b) {
    client::Values grads;
    const client::Values& from = p[std::max(0, b - 1)];
    ASSERT_TRUE(model.LossAndGradients(from, data.features.data(), data.labels.data(), kBatch,
                                       &grads)
                    .ok());
    client::Values next = p[b];
    for (size_t v = 0; v < next.size(); ++v) {
      for (size_t k = 0; k < next[v].size(); ++k) next[v][k] -= lr * grads[v][k];
    }
    p.push_back(std::move(next));
  }
  client::Values got;
  ASSERT_EQ(*client->Pull(&got), 10);
  double max_diff = 0;
  for (size_t v = 0; v < got.size(); ++v) {
    for (size_t k = 0; k < got[v].size(); ++k) {
      max_diff = std::max<double>(max_diff, std::abs(got[v][k] - p[10][v][k]));
    }
  }
  EXPECT_LT(max_diff, 1e-5);

  // --max_steps counts the push in flight: the job ends at it, not past.
  training.set_max_steps(7);
  Cluster capped(training, 2);
  std::unique_ptr<client::PsClient> capped_client = capped.Client(0);
  LoopControl capped_control;
  absl::StatusOr<int64_t> capped_step =
      TrainMlp(training, data, 3, capped_client.get(), capped_control);
  ASSERT_TRUE(capped_step.ok()) << capped_step.status();
  EXPECT_EQ(*capped_step, 7);
}

INSTANTIATE_TEST_SUITE_P(Modes, OverlapTest, ::testing::Values(proto::ASYNC, proto::SSP),
                         [](const ::testing::TestParamInfo<proto::SyncMode>& info) {
                           return info.param == proto::ASYNC ? "async" : "ssp";
                         });

// On devices the loop prefetches: batch b+1 is gathered into staging memory
// and copied while batch b computes. Two CPU devices (that path) must train
// the same parameters as the host path, every batch distinct and the last
// one of each epoch short, so a batch staged out of turn would show.
class PrefetchTest : public ::testing::TestWithParam<bool> {};

TEST_P(PrefetchTest, TwoCpuDevices_TrainSameParametersAsHostPath) {
  proto::TrainingConfig training = Training(proto::ASYNC, 1);
  training.set_batch_size(kBatch);
  training.set_epochs(2);
  training.set_overlap(GetParam());
  constexpr int kExamples = 4 * kBatch + 5;
  const Data examples(kExamples);
  data::Dataset data;
  data.num_examples = kExamples;
  data.dim = kFashionMnistDim;
  data.features = examples.x;
  data.labels = examples.y;

  device::DeviceOptions options;
  options.device = "cpu";
  options.cpu_devices = 2;
  absl::StatusOr<std::vector<device::LogicalDeviceSpec>> specs =
      device::PlanDevices(options, device::GpuInventory());
  ASSERT_TRUE(specs.ok()) << specs.status();
  absl::StatusOr<std::unique_ptr<device::DeviceSet>> devices = device::DeviceSet::Create(*specs);
  ASSERT_TRUE(devices.ok()) << devices.status();

  auto train = [&](std::vector<device::Device*> on) {
    Cluster cluster(training, 2);
    std::unique_ptr<client::PsClient> client = cluster.Client(0);
    LoopControl control;
    control.devices = std::move(on);
    std::vector<int64_t> examples_per_step;
    control.on_step = [&](int64_t n, float, int, int64_t, int64_t) {
      examples_per_step.push_back(n);
    };
    absl::StatusOr<int64_t> step = TrainMlp(training, data, 3, client.get(), control);
    EXPECT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(examples_per_step,
              (std::vector<int64_t>{8, 8, 8, 8, 5, 8, 8, 8, 8, 5}));
    client::Values params;
    EXPECT_EQ(*client->Pull(&params), 10);
    return params;
  };
  const client::Values host = train({});
  const client::Values staged = train((*devices)->devices());
  ASSERT_EQ(staged.size(), host.size());
  double max_diff = 0, max_step = 0;
  const client::Values initial = [&] {
    Cluster cluster(training, 1);
    client::Values p;
    cluster.Client(0)->Pull(&p).IgnoreError();
    return p;
  }();
  for (size_t v = 0; v < host.size(); ++v) {
    for (size_t k = 0; k < host[v].size(); ++k) {
      max_diff = std::max<double>(max_diff, std::abs(staged[v][k] - host[v][k]));
      max_step = std::max<double>(max_step, std::abs(host[v][k] - initial[v][k]));
    }
  }
  EXPECT_GT(max_step, 1e-2) << "training moved the parameters";
  EXPECT_LT(max_diff, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Overlap, PrefetchTest, ::testing::Bool());

}  // namespace
}  // namespace pst::models
