// A spec model's initial values end to end: the chief plans the job
// (PlanJob opens the safetensors file) and creates every ps's variables
// (CreatePlanOnPs, as Job::Start does) on in-process ps; a client then
// pulls back exactly the file's values, a partitioned table's rows
// included. The test links the ps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "chief/job.h"
#include "chief/ps_peers.h"
#include "client/ps_client.h"
#include "models/registry.h"
#include "models/safetensors_test_util.h"
#include "ps_server/in_process_control.h"
#include "ps_server/in_process_ps.h"
#include "ps_server/in_process_transport.h"

namespace pst::chief {
namespace {

using models::safetensors_testing::Iota;
using models::safetensors_testing::WriteSafetensors;

constexpr int kNumPs = 2;
// Big enough that each ps's share of it needs two create requests.
constexpr int64_t kBigRows = 600000;
constexpr int64_t kBigDim = 4;

class SpecCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/spec_create_test_", getpid());
    std::filesystem::create_directories(dir_);
    WriteSafetensors(dir_ + "/init.safetensors",
                     {{"w", {6, 4}, Iota(24, 0.25f, 1)},
                      {"t", {10, 3}, Iota(30, 1, 100)},
                      {"big", {kBigRows, kBigDim}, Iota(kBigRows * kBigDim, 1, -7)}});
    std::ofstream(dir_ + "/model.json") << R"({
      "format": "pstrain.model_spec/1",
      "initial_values": "init.safetensors",
      "variables": [
        {"name": "w", "shape": [6, 4], "kind": "dense", "init": "file"},
        {"name": "b", "shape": [4], "kind": "dense", "init": {"kind": "constant", "value": 0.5}},
        {"name": "t", "shape": [10, 3], "kind": "table", "init": "file"},
        {"name": "big", "shape": [600000, 4], "kind": "table", "init": "file"},
        {"name": "h", "kind": "hash", "dim": 2, "init": {"kind": "zeros"}}
      ]
    })";
    options_.tf.cluster.ps = {"ps0:1", "ps1:1"};
    options_.tf.cluster.worker = {"worker0:1"};
    options_.tf.cluster.chief = {"chief:1"};
    proto::TrainingConfig& training = options_.training;
    training.set_model(absl::StrCat("spec:", dir_, "/model.json"));
    ASSERT_TRUE((*models::ModelFor(training))->ReadFiles(&training).ok());
    training.mutable_optimizer()->set_name("sgd");
    training.mutable_optimizer()->set_learning_rate(1.0f);
    training.mutable_partitioner()->set_kind("fixed");
    training.mutable_partitioner()->set_num_shards(kNumPs);
    training.set_routing(proto::MOD);
    training.set_dense_piece_bytes(32);  // w's 96 bytes in 3 pieces of 2 rows
    training.set_placement("round_robin");
    ps_ = std::make_shared<ps::InProcessPs>(kNumPs);
    control_ = std::make_unique<ps::InProcessPsControl>(ps_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Creates the plan's variables on every ps; returns how many were new.
  int CreateAll(const JobPlan& plan) {
    int created = 0;
    for (int i = 0; i < kNumPs; ++i) {
      absl::StatusOr<int> n =
          CreatePlanOnPs(*control_, i, i, options_.tf.cluster.ps[i], plan.initial,
                         plan.initial_values, absl::InfiniteFuture(), *common::RealClock(), stop_);
      EXPECT_TRUE(n.ok()) << n.status();
      created += n.value_or(0);
    }
    return created;
  }

  std::unique_ptr<client::PsClient> Client(const JobPlan& plan) {
    absl::StatusOr<std::unique_ptr<client::PsClient>> client = client::PsClient::Create(
        plan.initial.plan(), {"w", "b"}, std::make_shared<ps::InProcessPsTransport>(ps_),
        /*worker_index=*/0, /*incarnation=*/1);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  std::vector<float> Rows(client::PsClient* client, const std::string& table, int64_t rows) {
    std::vector<int64_t> ids(rows);
    std::iota(ids.begin(), ids.end(), 0);
    const client::PsClient::TableIds request[] = {{table, ids}};
    client::Values out;
    absl::Status s = client->PullRows(request, &out);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? out[0] : std::vector<float>();
  }

  std::string dir_;
  ChiefOptions options_;
  std::shared_ptr<ps::InProcessPs> ps_;
  std::unique_ptr<ps::InProcessPsControl> control_;
  common::StopSignal stop_;
};

TEST_F(SpecCreateTest, CreatePlanOnPs_FileValues_PullBackExactlyTheFile) {
  absl::StatusOr<JobPlan> plan = PlanJob(options_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_NE(plan->initial_values, nullptr);
  // The values (9.6 MB) travel only in the create calls, never in the
  // state the workers receive.
  EXPECT_LT(plan->initial.ByteSizeLong(), 16u << 10);
  int w_pieces = 0, t_parts = 0;
  for (const auto& entry : plan->initial.plan().variables()) {
    w_pieces += entry.spec().variable() == "w";
    t_parts += entry.spec().variable() == "t";
  }
  EXPECT_EQ(w_pieces, 3);
  EXPECT_EQ(t_parts, 2);
  EXPECT_EQ(CreateAll(*plan), plan->initial.plan().variables_size());

  std::unique_ptr<client::PsClient> client = Client(*plan);
  client::Values values;
  ASSERT_TRUE(client->Pull(&values).ok());
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0], Iota(24, 0.25f, 1));
  EXPECT_EQ(values[1], std::vector<float>(4, 0.5f));
  EXPECT_EQ(Rows(client.get(), "t", 10), Iota(30, 1, 100));
  EXPECT_EQ(Rows(client.get(), "big", kBigRows), Iota(kBigRows * kBigDim, 1, -7));
}

TEST_F(SpecCreateTest, CreatePlanOnPs_Again_KeepsTheValuesThePsHold) {
  absl::StatusOr<JobPlan> plan = PlanJob(options_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CreateAll(*plan);
  std::unique_ptr<client::PsClient> client = Client(*plan);
  // One SGD step (learning rate 1): w -= 1.
  client::Values grads = {std::vector<float>(24, 1.0f), std::vector<float>(4, 0.0f)};
  client::Values values;
  ASSERT_TRUE(client->PushPull(/*step=*/0, /*base_version=*/0, grads, &values).ok());
  // A restarted chief creates again: nothing is new, nothing overwritten
  // (as a restore's values are not).
  EXPECT_EQ(CreateAll(*plan), 0);
  ASSERT_TRUE(client->Pull(&values).ok());
  EXPECT_EQ(values[0], Iota(24, 0.25f, 0));
}

TEST_F(SpecCreateTest, PlanJob_FileGoneSincePlanning_FailsNotFound) {
  std::filesystem::remove(dir_ + "/init.safetensors");
  absl::StatusOr<JobPlan> plan = PlanJob(options_);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound) << plan.status();
}

}  // namespace
}  // namespace pst::chief
