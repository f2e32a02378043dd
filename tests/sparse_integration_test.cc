// Partitioned embeddings and sparse access over real gRPC: bad sparse input
// is rejected with a clear status and changes nothing; `pstrain plan`
// balances a 10-million-row model; wide & deep trained through a cluster
// matches the same model trained in one process.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "rpc/grpc_channel.h"
#include "common/partition.h"
#include "common/tensor_util.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.grpc.pb.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

// A 10x3 table split in 2 'mod' partitions, both on one ps.
class SparsePsTest : public LonePsTest {
 protected:
  void CreateTable(bool skip_nonfinite) {
    proto::VariableSpec table;
    table.set_name("emb");
    table.set_dtype(proto::DT_FLOAT32);
    table.add_shape(10);
    table.add_shape(3);
    table.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
    table.mutable_initializer()->set_scale(0.5f);
    table.mutable_initializer()->set_seed(9);
    absl::StatusOr<std::vector<proto::VariableSpec>> parts =
        common::SplitVariable(table, 2, proto::MOD);
    ASSERT_TRUE(parts.ok()) << parts.status();
    proto::CreateVariablesRequest create;
    for (const auto& p : *parts) *create.add_variables() = p;
    create.mutable_optimizer()->set_name("sgd");
    create.mutable_optimizer()->set_learning_rate(1.0f);
    create.mutable_optimizer()->set_skip_nonfinite(skip_nonfinite);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    proto::CreateVariablesResponse response;
    grpc::Status status = stub_->CreateVariables(&context, create, &response);
    ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << ps_->output();
  }

  // Every row of both partitions, as the ps holds them.
  std::string Snapshot() {
    proto::PullResponse response;
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    EXPECT_TRUE(stub_->Pull(&context, proto::PullRequest(), &response).ok());
    return response.SerializeAsString();
  }

  static proto::PushRowsRequest Push(const std::string& part, std::vector<int64_t> ids,
                                     std::vector<float> values, int64_t width = 3) {
    proto::PushRowsRequest push;
    proto::RowIds* rows = push.add_rows();
    rows->set_name(part);
    for (int64_t id : ids) rows->add_ids(id);
    const int64_t n = static_cast<int64_t>(values.size()) / width;
    const std::vector<int64_t> shape = {n, width};
    common::PackFloats(values, common::Shape(shape.begin(), shape.end()), push.add_gradients());
    return push;
  }

  grpc::Status Send(const proto::PushRowsRequest& push, proto::PushRowsResponse* response) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    return stub_->PushRows(&context, push, response);
  }
};

TEST_F(SparsePsTest, BadSparsePushes_AreRejectedClearly_AndChangeNothing) {
  CreateTable(/*skip_nonfinite=*/false);
  const std::string before = Snapshot();
  struct Case {
    std::string what;
    proto::PushRowsRequest push;
    grpc::StatusCode code;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {"id out of range", Push("emb/part_0", {0, 12}, std::vector<float>(6, 1.0f)),
       grpc::StatusCode::INVALID_ARGUMENT, "12"},
      {"id of the other partition", Push("emb/part_0", {3}, {1, 1, 1}),
       grpc::StatusCode::INVALID_ARGUMENT, "3"},
      {"negative id", Push("emb/part_1", {-1}, {1, 1, 1}), grpc::StatusCode::INVALID_ARGUMENT,
       "-1"},
      {"rows of the wrong width", Push("emb/part_0", {0, 2}, std::vector<float>(4, 1.0f), 2),
       grpc::StatusCode::INVALID_ARGUMENT, "emb/part_0"},
      {"more ids than rows", Push("emb/part_0", {0, 2, 4}, std::vector<float>(6, 1.0f)),
       grpc::StatusCode::INVALID_ARGUMENT, "emb/part_0"},
      {"NaN gradient", Push("emb/part_1", {1, 3}, {1, 1, 1, 1, NAN, 1}),
       grpc::StatusCode::INVALID_ARGUMENT, "NaN"},
      {"Inf gradient", Push("emb/part_1", {1}, {INFINITY, 1, 1}),
       grpc::StatusCode::INVALID_ARGUMENT, "Inf"},
      {"unknown table", Push("nope/part_0", {0}, {1, 1, 1}), grpc::StatusCode::NOT_FOUND,
       "nope/part_0"},
  };
  for (const Case& c : cases) {
    proto::PushRowsResponse response;
    grpc::Status status = Send(c.push, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.what << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(c.message_part), std::string::npos)
        << c.what << ": " << status.error_message();
  }
  EXPECT_EQ(Snapshot(), before);

  // A good sparse push moves exactly its rows: lr 1, so row -= gradient.
  proto::PullRowsRequest pull;
  proto::RowIds* ids = pull.add_rows();
  ids->set_name("emb/part_1");
  ids->add_ids(1);
  ids->add_ids(7);
  auto read_rows = [&] {
    proto::PullRowsResponse rows;
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    EXPECT_TRUE(stub_->PullRows(&context, pull, &rows).ok());
    std::vector<float> out(6);
    common::UnpackFloats(rows.values(0), out);
    return out;
  };
  const std::vector<float> old_rows = read_rows();
  proto::PushRowsResponse response;
  ASSERT_TRUE(Send(Push("emb/part_1", {7}, {0.5f, -1.0f, 2.0f}), &response).ok());
  const std::vector<float> new_rows = read_rows();
  for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(new_rows[d], old_rows[d]) << "row 1 untouched";
  EXPECT_FLOAT_EQ(new_rows[3], old_rows[3] - 0.5f);
  EXPECT_FLOAT_EQ(new_rows[4], old_rows[4] + 1.0f);
  EXPECT_FLOAT_EQ(new_rows[5], old_rows[5] - 2.0f);
}

TEST_F(SparsePsTest, SkipNonfinite_DropsAndCountsBadRows_AppliesTheRest) {
  CreateTable(/*skip_nonfinite=*/true);
  proto::PushRowsResponse response;
  ASSERT_TRUE(Send(Push("emb/part_0", {0, 2}, {NAN, 0, 0, 1, 1, 1}), &response).ok());
  EXPECT_EQ(response.rows_skipped(), 1);
  proto::HealthResponse health;
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout);
  ASSERT_TRUE(stub_->Health(&context, proto::HealthRequest(), &health).ok());
  EXPECT_EQ(health.nonfinite_skipped(), 1);
}

double ImbalanceFromPlan(const std::string& output) {
  std::smatch m;
  const std::regex re(R"(imbalance \(most-loaded ps / mean\): ([0-9.]+))");
  return std::regex_search(output, m, re) ? std::stod(m[1]) : -1;
}

TEST(PlanTest, TenMillionRowModel_SizeBalanced_IsWithinTenPercent) {
  auto plan = TestProcess::Start({BinaryPath("pstrain"), "plan", "--ps=2", "--model=wide_deep",
                                  "--buckets_per_field=400000", "--embedding_dim=16",
                                  "--placement=size_balanced"});
  ASSERT_TRUE(plan.ok());
  std::optional<int> exited = (*plan)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  const std::string output = (*plan)->output();
  ASSERT_EQ(ExitCode(*exited), 0) << output;
  // 26 fields x 400000 rows in each of the two tables.
  EXPECT_NE(output.find("[10400000, 16]"), std::string::npos) << output;
  EXPECT_NE(output.find("deep/embedding/part_"), std::string::npos) << output;
  const double imbalance = ImbalanceFromPlan(output);
  EXPECT_GE(imbalance, 1.0) << output;
  EXPECT_LE(imbalance, 1.10) << output;
}

TEST(PlanTest, EachVariable_ShowsItsOwnOptimizer) {
  auto plan = TestProcess::Start({BinaryPath("pstrain"), "plan", "--ps=2", "--model=wide_deep",
                                  "--table_optimizer=adagrad", "--optimizer_form=torch"});
  ASSERT_TRUE(plan.ok());
  std::optional<int> exited = (*plan)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  const std::string output = (*plan)->output();
  ASSERT_EQ(ExitCode(*exited), 0) << output;
  EXPECT_TRUE(
      std::regex_search(output, std::regex(R"(deep/embedding/part_0 .* adagrad \(torch\))")))
      << output;
  EXPECT_TRUE(std::regex_search(output, std::regex(R"(wide/bias .* adam \(torch\))"))) << output;
}

TEST(PlanTest, BadPartitionerFlag_ExitsTwoWithMessage) {
  auto plan = TestProcess::Start(
      {BinaryPath("pstrain"), "plan", "--model=wide_deep", "--partitioner=fixed"});
  ASSERT_TRUE(plan.ok());
  std::optional<int> exited = (*plan)->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(ExitCode(*exited), 2);
  EXPECT_NE((*plan)->output().find("--num_shards"), std::string::npos) << (*plan)->output();
}

class WideDeepClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/wide_deep_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    data_ = dir_ + "/criteo.tsv";
    auto gen = TestProcess::Start({BinaryPath("pstrain"), "generate_criteo", "--out=" + data_,
                                   "--rows=30000", "--vocab=500", "--seed=7"});
    ASSERT_TRUE(gen.ok());
    std::optional<int> exited = (*gen)->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value());
    ASSERT_EQ(ExitCode(*exited), 0) << (*gen)->output();
    const std::string out = (*gen)->output();
    best_auc_ = nlohmann::json::parse(out.substr(out.find('{')))["best_auc"].get<double>();
  }

  // Runs `pstrain <command>` with the model flags; returns its summary JSON.
  nlohmann::json Run(std::vector<std::string> args) {
    const std::string summary = absl::StrCat(dir_, "/", args[0], ".json");
    // The shared model flags first, so the test's own flags override them.
    std::vector<std::string> argv = {BinaryPath("pstrain"), args[0]};
    for (const char* flag : {"--model=wide_deep", "--buckets_per_field=500", "--epochs=2",
                             "--batch_size=128", "--learning_rate=0.005", "--seed=3"}) {
      argv.push_back(flag);
    }
    argv.insert(argv.end(), args.begin() + 1, args.end());
    argv.push_back("--data=" + data_);
    argv.push_back("--summary_json=" + summary);
    auto process = TestProcess::Start(argv);
    EXPECT_TRUE(process.ok());
    if (!process.ok()) return {};
    std::optional<int> exited = (*process)->WaitForExit(absl::Seconds(240));
    EXPECT_TRUE(exited.has_value()) << (*process)->output();
    EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << (*process)->output();
    output_ = (*process)->output();
    std::ifstream in(summary);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  std::string dir_, data_;
  std::string output_;  // of the last Run
  double best_auc_ = 0;
};

TEST_F(WideDeepClusterTest, ClusterAuc_MatchesSingleProcessWithin001) {
  const nlohmann::json cluster =
      Run({"local", "--ps=2", "--workers=2", "--heartbeat_ms=200", "--log_every_s=1",
           "--timeout_s=240", "--partitioner=fixed", "--num_shards=3", "--routing=div"});
  const nlohmann::json single =
      Run({"reference", "--ps=2", "--partitioner=fixed", "--num_shards=3", "--routing=div"});
  ASSERT_TRUE(cluster.contains("test_auc")) << cluster.dump();
  ASSERT_TRUE(single.contains("test_auc")) << single.dump();
  const double a = cluster["test_auc"].get<double>(), b = single["test_auc"].get<double>();
  std::printf("best achievable AUC %.4f, cluster %.4f, single process %.4f\n", best_auc_, a, b);
  EXPECT_NEAR(a, b, 0.01);
  // Both learned something real: well above chance, not above the best possible.
  EXPECT_GT(b, 0.5 + 0.5 * (best_auc_ - 0.5));
  EXPECT_LE(b, best_auc_ + 0.02);
}

TEST_F(WideDeepClusterTest, HashEmbeddingsWithAdmission_Train) {
  const nlohmann::json cluster =
      Run({"local", "--ps=2", "--workers=2", "--heartbeat_ms=200", "--log_every_s=1",
           "--timeout_s=240", "--buckets_per_field=0", "--admit_after=2"});
  ASSERT_TRUE(cluster.contains("test_auc")) << cluster.dump();
  EXPECT_GT(cluster["test_auc"].get<double>(), 0.5 + 0.5 * (best_auc_ - 0.5)) << cluster.dump();
  // Rows were created on both ps, and no more than the distinct values
  // (26 fields x at most 500 values + empty ones) could make.
  const std::vector<int64_t> rows = cluster["hash_rows_per_ps"].get<std::vector<int64_t>>();
  ASSERT_EQ(rows.size(), 2u);
  int64_t total = 0;
  for (int64_t r : rows) {
    EXPECT_GT(r, 0);
    total += r;
  }
  EXPECT_LE(total, 2 * 26 * 501);  // both tables
}

// Wide & deep on two logical devices per worker (MirroredWideDeep): each
// batch is split across them, and the job still learns.
TEST_F(WideDeepClusterTest, TwoCpuDevicesPerWorker_SplitEachBatch_AndTrain) {
  const nlohmann::json cluster =
      Run({"local", "--ps=1", "--workers=1", "--heartbeat_ms=200", "--log_every_s=1",
           "--timeout_s=240", "--cpu_devices=2", "--log_device_placement"});
  ASSERT_TRUE(cluster.contains("test_auc")) << cluster.dump();
  EXPECT_GT(cluster["test_auc"].get<double>(), 0.5 + 0.5 * (best_auc_ - 0.5)) << cluster.dump();
  EXPECT_NE(output_.find("deep_embedding/Gather: (GatherV2): /job:worker/replica:0/task:0/"
                         "device:CPU:1"),
            std::string::npos)
      << output_;
}

}  // namespace
}  // namespace pst::testing
