// PsClient's routing, deduplication and reassembly, against in-process ps
// (the real VariableStore behind a fake transport; no network).
#include "worker/ps_client.h"

#include <gtest/gtest.h>

#include "common/initializer.h"
#include "common/partition.h"
#include "common/placement.h"
#include "ps_server/in_process_transport.h"

namespace pst::worker {
namespace {

constexpr int64_t kRows = 10, kDim = 2;

proto::VariableSpec TableSpec() {
  proto::VariableSpec spec;
  spec.set_name("emb");
  spec.set_dtype(proto::DT_FLOAT32);
  spec.add_shape(kRows);
  spec.add_shape(kDim);
  spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(1.0f);
  spec.mutable_initializer()->set_seed(5);
  return spec;
}

// Row `id` of the unpartitioned table, as initialized.
std::vector<float> InitialRow(int64_t id) {
  std::vector<float> row(kDim);
  common::FillInitialValues(TableSpec(), id * kDim, row);
  return row;
}

class PsClientTest : public ::testing::TestWithParam<proto::Routing> {
 protected:
  void SetUp() override {
    std::vector<proto::VariableSpec> specs = *common::SplitVariable(TableSpec(), 3, GetParam());
    proto::VariableSpec bias;
    bias.set_name("bias");
    bias.set_dtype(proto::DT_FLOAT32);
    bias.add_shape(3);
    specs.push_back(bias);
    plan_ = *common::PlaceRoundRobin(specs, 2);
    transport_ = std::make_shared<ps::InProcessPsTransport>(2);
    for (int p = 0; p < 2; ++p) {
      proto::CreateVariablesRequest request;
      request.mutable_optimizer()->set_name("sgd");
      request.mutable_optimizer()->set_learning_rate(1.0f);
      for (const auto& entry : plan_.variables()) {
        if (entry.ps_index() == p) *request.add_variables() = entry.spec();
      }
      ASSERT_TRUE(transport_->store(p)->Create(request).ok());
    }
    client_ = *PsClient::Create(plan_, {"bias"}, transport_, 0, 1);
  }

  std::vector<float> Pull(std::vector<int64_t> ids) {
    std::vector<PsClient::TableIds> tables = {{"emb", ids}};
    Values out;
    absl::Status status = client_->PullRows(tables, &out);
    EXPECT_TRUE(status.ok()) << status;
    return out.empty() ? std::vector<float>() : out[0];
  }

  proto::PlacementPlan plan_;
  std::shared_ptr<ps::InProcessPsTransport> transport_;
  std::unique_ptr<PsClient> client_;
};

TEST_P(PsClientTest, PullRows_ReturnsUnpartitionedValuesInCallerOrder) {
  const std::vector<int64_t> ids = {9, 0, 4, 9, 5, 0, 7};
  const std::vector<float> rows = Pull(ids);
  ASSERT_EQ(rows.size(), ids.size() * kDim);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> want = InitialRow(ids[i]);
    for (int d = 0; d < kDim; ++d) EXPECT_EQ(rows[i * kDim + d], want[d]) << "id " << ids[i];
  }
  EXPECT_EQ(*client_->TableDim("emb"), kDim);
}

TEST_P(PsClientTest, PushRows_SumsDuplicateIds_AndTouchesOnlyThoseRows) {
  const std::vector<int64_t> ids = {3, 8, 3};
  const Values grads = {{1.0f, 2.0f, 10.0f, 20.0f, 0.5f, 0.25f}};
  std::vector<PsClient::TableIds> tables = {{"emb", ids}};
  ASSERT_TRUE(client_->PushRows(0, tables, grads).ok());
  const std::vector<float> rows = Pull({3, 8, 2});
  const std::vector<float> r3 = InitialRow(3), r8 = InitialRow(8), r2 = InitialRow(2);
  EXPECT_FLOAT_EQ(rows[0], r3[0] - 1.5f);   // 1 + 0.5, lr 1
  EXPECT_FLOAT_EQ(rows[1], r3[1] - 2.25f);  // 2 + 0.25
  EXPECT_FLOAT_EQ(rows[2], r8[0] - 10.0f);
  EXPECT_FLOAT_EQ(rows[3], r8[1] - 20.0f);
  EXPECT_EQ(rows[4], r2[0]);
  EXPECT_EQ(rows[5], r2[1]);
}

TEST_P(PsClientTest, BadIds_AreInvalidArgument_AndNothingIsSent) {
  std::vector<int64_t> ids = {1, kRows};
  std::vector<PsClient::TableIds> tables = {{"emb", ids}};
  Values out;
  absl::Status pulled = client_->PullRows(tables, &out);
  EXPECT_EQ(pulled.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(pulled.message()).find("10"), std::string::npos) << pulled;
  const Values grads = {{1, 1, 1, 1}};
  EXPECT_EQ(client_->PushRows(0, tables, grads).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(transport_->store(0)->GetStats().pushes_applied, 0);
  EXPECT_EQ(transport_->store(1)->GetStats().pushes_applied, 0);

  std::vector<int64_t> good = {1};
  std::vector<PsClient::TableIds> unknown = {{"nope", good}};
  EXPECT_EQ(client_->PullRows(unknown, &out).code(), absl::StatusCode::kNotFound);
  std::vector<PsClient::TableIds> short_grad = {{"emb", good}};
  EXPECT_EQ(client_->PushRows(0, short_grad, Values{{1.0f}}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(PsClientTest, DensePushPull_RoutesToTheHoldingPs) {
  Values values;
  ASSERT_EQ(*client_->Pull(&values), 0);
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], std::vector<float>(3, 0.0f));
  absl::StatusOr<int64_t> version = client_->PushPull(0, 0, Values{{1, 2, 3}}, &values);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1);
  EXPECT_EQ(values[0], (std::vector<float>{-1, -2, -3}));
}

INSTANTIATE_TEST_SUITE_P(Routings, PsClientTest, ::testing::Values(proto::MOD, proto::DIV),
                         [](const auto& info) { return proto::Routing_Name(info.param); });

}  // namespace
}  // namespace pst::worker
