// PsClient's routing, deduplication and reassembly, against in-process ps
// (the real VariableStore behind a fake transport; no network).
#include "client/ps_client.h"

#include <gtest/gtest.h>

#include "common/bf16.h"
#include "common/initializer.h"
#include "common/partition.h"
#include "common/placement.h"
#include "ps_server/in_process_transport.h"

namespace pst::client {
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

// Top-k with error feedback: each push sends the largest entries of the
// gradient plus what earlier pushes held back, so pushing zeros after a
// gradient drains the rest; with SGD at rate 1 each entry is subtracted
// exactly once, whatever push carried it.
TEST_P(PsClientTest, TopK_SendsTheLargestEntries_AndTheRestLater) {
  Values values;
  ASSERT_TRUE(client_->Pull(&values).ok());
  const std::vector<float> v0 = values[0];
  client_->set_topk_ratio(0.34);  // 2 of the 3 entries a push
  ASSERT_TRUE(client_->PushPull(0, 0, Values{{0.5f, -4.0f, 2.0f}}, &values).ok());
  EXPECT_EQ(values[0], (std::vector<float>{v0[0], v0[1] + 4.0f, v0[2] - 2.0f}));
  ASSERT_TRUE(client_->PushPull(1, 1, Values{{0.0f, 0.0f, 0.0f}}, &values).ok());
  EXPECT_EQ(values[0], (std::vector<float>{v0[0] - 0.5f, v0[1] + 4.0f, v0[2] - 2.0f}));
  // 2 entries of 8 bytes a push.
  EXPECT_EQ(client_->dense_wire_bytes().pushed, 2 * 16);
  // A push that fails (a wrong size) leaves the residual as it was.
  EXPECT_EQ(client_->PushPull(2, 2, Values{{1.0f}}, &values).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client_->PushPull(3, 2, Values{{0.0f, 0.0f, 0.0f}}, &values).ok());
  EXPECT_EQ(values[0], (std::vector<float>{v0[0] - 0.5f, v0[1] + 4.0f, v0[2] - 2.0f}));
  // 1.0 and the first 0.125 go; the second is held back, and setting the
  // same generation again keeps it.
  ASSERT_TRUE(client_->PushPull(4, 3, Values{{1.0f, 0.125f, 0.125f}}, &values).ok());
  const std::vector<float> v4 = values[0];
  client_->set_generation(0);
  ASSERT_TRUE(client_->PushPull(5, 4, Values{{0.0f, 0.0f, 0.0f}}, &values).ok());
  EXPECT_EQ(values[0], (std::vector<float>{v4[0], v4[1], v4[2] - 0.125f}));
}

// After a restore (a new generation) the residual held back before it is
// dropped: it was computed from parameters the restore replaced.
TEST_P(PsClientTest, TopK_NewGeneration_DropsTheResidual) {
  client_->set_topk_ratio(0.34);
  Values values;
  ASSERT_TRUE(client_->PushPull(0, 0, Values{{1.0f, 2.0f, 3.0f}}, &values).ok());
  const std::vector<float> v1 = values[0];  // 2 and 3 applied, 1 held back
  // Every ps restored to its own state, as generation 1.
  for (int p = 0; p < 2; ++p) {
    const std::vector<common::ShardRecord> records = transport_->store(p)->Snapshot();
    std::vector<const common::ShardRecord*> pointers;
    for (const auto& r : records) pointers.push_back(&r);
    ASSERT_TRUE(transport_->store(p)->Restore(pointers, /*generation=*/1).ok());
  }
  client_->set_generation(1);
  ASSERT_TRUE(client_->PushPull(1, 1, Values{{0.0f, 0.0f, 0.0f}}, &values).ok());
  EXPECT_EQ(values[0], v1) << "the held-back 1.0 was sent after the restore";
}

// The span overloads (caller memory, as Python's buffers): the same
// results as the vector ones, and a buffer of the wrong size is refused,
// naming the variable, before anything reaches the ps.
TEST_P(PsClientTest, SpanCalls_WriteCallerMemory_AndRefuseWrongSizes) {
  const std::vector<PsClient::DenseInfo> dense = client_->DenseVariables();
  ASSERT_EQ(dense.size(), 1u);
  EXPECT_EQ(dense[0].name, "bias");
  EXPECT_EQ(dense[0].shape, std::vector<int64_t>{3});

  std::vector<float> memory(3, 7.0f);
  ASSERT_EQ(*client_->Pull(ValueSpans{memory}), 0);
  EXPECT_EQ(memory, std::vector<float>(3, 0.0f));

  std::vector<float> too_short(2), grad = {1, 2, 3};
  absl::StatusOr<int64_t> refused = client_->Pull(ValueSpans{too_short});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("bias"), std::string_view::npos) << refused.status();
  refused = client_->PushPull(0, 0, GradientSpans{std::span<const float>(too_short)},
                              ValueSpans{memory});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  refused = client_->PushPull(0, 0, GradientSpans{grad}, ValueSpans{too_short});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->PushPull(0, 0, GradientSpans{}, ValueSpans{memory}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(transport_->store(0)->GetStats().pushes_applied +
                transport_->store(1)->GetStats().pushes_applied,
            0);

  absl::StatusOr<int64_t> version = client_->PushPull(0, 0, GradientSpans{grad}, ValueSpans{memory});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1);
  EXPECT_EQ(memory, (std::vector<float>{-1, -2, -3}));

  // Rows: into caller memory, and a wrong-sized output names the table.
  std::vector<int64_t> ids = {4, 2};
  std::vector<PsClient::TableIds> tables = {{"emb", ids}};
  std::vector<float> rows(ids.size() * kDim), short_rows(1);
  ASSERT_TRUE(client_->PullRows(tables, ValueSpans{rows}).ok());
  std::vector<float> want = InitialRow(4);
  const std::vector<float> row2 = InitialRow(2);
  want.insert(want.end(), row2.begin(), row2.end());
  EXPECT_EQ(rows, want);
  absl::Status bad = client_->PullRows(tables, ValueSpans{short_rows});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("emb"), std::string_view::npos) << bad;
  const std::vector<float> row_grads(ids.size() * kDim, 1.0f);
  ASSERT_TRUE(client_->PushRows(1, tables, GradientSpans{row_grads}).ok());
  ASSERT_TRUE(client_->PullRows(tables, ValueSpans{rows}).ok());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_FLOAT_EQ(rows[i], want[i] - 1.0f);
}

// A dense variable cut into pieces (TrainingConfig.dense_piece_bytes)
// behaves exactly as the whole variable: same initial values, same updates,
// and a retried push is still applied once, piece by piece.
class DensePiecesTest : public ::testing::Test {
 protected:
  static constexpr int64_t kW = 37, kH = 5;  // 37 rows of 5 floats

  static std::vector<proto::VariableSpec> Specs(int64_t piece_bytes) {
    proto::VariableSpec w;
    w.set_name("w");
    w.set_dtype(proto::DT_FLOAT32);
    w.add_shape(kW);
    w.add_shape(kH);
    w.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
    w.mutable_initializer()->set_scale(1.0f);
    w.mutable_initializer()->set_seed(11);
    proto::VariableSpec b;
    b.set_name("b");
    b.set_dtype(proto::DT_FLOAT32);
    b.add_shape(kH);
    std::vector<proto::VariableSpec> specs = *common::SplitDense(w, piece_bytes);
    specs.push_back(b);
    return specs;
  }

  // Two in-process ps holding `specs` size-balanced, with Adam.
  static std::shared_ptr<ps::InProcessPsTransport> Start(
      const std::vector<proto::VariableSpec>& specs, proto::PlacementPlan* plan) {
    *plan = *common::PlaceSizeBalanced(specs, 2);
    auto transport = std::make_shared<ps::InProcessPsTransport>(2);
    for (int p = 0; p < 2; ++p) {
      proto::CreateVariablesRequest request;
      request.mutable_optimizer()->set_name("adam");
      request.mutable_optimizer()->set_learning_rate(0.01f);
      request.mutable_optimizer()->set_beta1(0.9f);
      request.mutable_optimizer()->set_beta2(0.999f);
      request.mutable_optimizer()->set_epsilon(1e-7f);
      for (const auto& entry : plan->variables()) {
        if (entry.ps_index() == p) *request.add_variables() = entry.spec();
      }
      absl::StatusOr<int> created = transport->store(p)->Create(request);
      EXPECT_TRUE(created.ok()) << created.status();
    }
    return transport;
  }
};

TEST_F(DensePiecesTest, PiecesOverTwoPs_MatchTheWholeVariable_AndARetryIsAppliedOnce) {
  proto::PlacementPlan whole_plan, cut_plan;
  auto whole_ps = Start(Specs(0), &whole_plan);
  const std::vector<proto::VariableSpec> cut_specs = Specs(3 * kH * sizeof(float));  // 3 rows
  ASSERT_EQ(cut_specs.size(), 13u + 1);  // 37 rows in 13 pieces, and b
  auto cut_ps = Start(cut_specs, &cut_plan);
  std::unique_ptr<PsClient> whole = *PsClient::Create(whole_plan, {"w", "b"}, whole_ps, 0, 1);
  // Requests of one piece each: several requests, hence parts, per ps.
  absl::StatusOr<std::unique_ptr<PsClient>> cut_or =
      PsClient::Create(cut_plan, {"w", "b"}, cut_ps, 0, 1, 3 * kH * sizeof(float));
  ASSERT_TRUE(cut_or.ok()) << cut_or.status();
  std::unique_ptr<PsClient> cut = *std::move(cut_or);
  EXPECT_GE(cut->num_dense_requests(), 7);
  EXPECT_TRUE(cut->TableNames().empty()) << "pieces are not a table";

  Values want, got;
  ASSERT_EQ(*whole->Pull(&want), 0);
  ASSERT_EQ(*cut->Pull(&got), 0);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got[0].size(), static_cast<size_t>(kW * kH));
  EXPECT_EQ(got, want);

  Values grads = {std::vector<float>(kW * kH), std::vector<float>(kH)};
  for (int step = 1; step <= 3; ++step) {
    for (size_t v = 0; v < grads.size(); ++v) {
      for (size_t i = 0; i < grads[v].size(); ++i) grads[v][i] = 0.01f * step * (i % 7) - 0.02f;
    }
    absl::StatusOr<int64_t> want_version = whole->PushPull(step, step - 1, grads, &want);
    absl::StatusOr<int64_t> got_version = cut->PushPull(step, step - 1, grads, &got);
    ASSERT_TRUE(got_version.ok()) << got_version.status();
    EXPECT_EQ(*got_version, *want_version);
    EXPECT_EQ(got, want) << "step " << step;
  }
  // The same step again (a retry): every piece recognizes it.
  ASSERT_TRUE(cut->PushPull(3, 2, grads, &got).ok());
  EXPECT_EQ(got, want);
  // Push alone lands like PushPull's push.
  ASSERT_EQ(*cut->Push(4, 3, grads), 4);
  ASSERT_TRUE(whole->PushPull(4, 3, grads, &want).ok());
  ASSERT_TRUE(cut->Pull(&got).ok());
  EXPECT_EQ(got, want);
}

// Values as bf16 carries them.
Values Rounded(Values values) {
  for (auto& v : values) {
    for (float& x : v) x = common::Bf16ToFloat(common::FloatToBf16(x));
  }
  return values;
}

// A client with bf16 on the wire, over pieces in several requests per ps:
// the ps apply exactly its gradients rounded (as a float32 client's of the
// rounded gradients), and its values arrive rounded; half the payload.
TEST_F(DensePiecesTest, Bf16OnTheWire_AppliesTheRoundedGradients_AndAnswersRounded) {
  proto::PlacementPlan ref_plan, cut_plan;
  auto ref_ps = Start(Specs(0), &ref_plan);
  auto cut_ps = Start(Specs(3 * kH * sizeof(float)), &cut_plan);
  std::unique_ptr<PsClient> ref = *PsClient::Create(ref_plan, {"w", "b"}, ref_ps, 0, 1);
  std::unique_ptr<PsClient> half =
      *PsClient::Create(cut_plan, {"w", "b"}, cut_ps, 0, 1, 3 * kH * sizeof(float));
  half->set_wire_dtype(proto::DT_BFLOAT16);
  Values want, got;
  ASSERT_EQ(*ref->Pull(&want), 0);
  ASSERT_EQ(*half->Pull(&got), 0);
  EXPECT_EQ(got, Rounded(want));
  Values grads = {std::vector<float>(kW * kH), std::vector<float>(kH)};
  for (int step = 1; step <= 3; ++step) {
    for (size_t v = 0; v < grads.size(); ++v) {
      for (size_t i = 0; i < grads[v].size(); ++i) grads[v][i] = 0.0123f * step * (i % 7) - 0.02f;
    }
    ASSERT_TRUE(ref->PushPull(step, step - 1, Rounded(grads), &want).ok());
    absl::StatusOr<int64_t> version = half->PushPull(step, step - 1, grads, &got);
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(got, Rounded(want)) << "step " << step;
  }
  const int64_t floats = kW * kH + kH;
  EXPECT_EQ(half->dense_wire_bytes().pushed, 3 * floats * 2);
  EXPECT_EQ(half->dense_wire_bytes().pulled, 4 * floats * 2);
  EXPECT_EQ(ref->dense_wire_bytes().pushed, 3 * floats * 4);
}

// A ps's share of a step that needs more than kRequestsInFlight requests
// goes in requests of request_bytes, so that it travels in several waves;
// one that fits in a single wave goes in requests of up to twice that.
TEST_F(DensePiecesTest, RequestSize_IsHalvedOnlyForAShareBeyondOneWave) {
  const int64_t row_bytes = kH * sizeof(float);
  proto::PlacementPlan plan;
  auto transport = Start(Specs(row_bytes), &plan);  // 37 one-row pieces, and b
  std::vector<int64_t> share(2, 0);
  for (const auto& entry : plan.variables()) {
    share[entry.ps_index()] += row_bytes;  // every piece, and b, is one row
  }
  ASSERT_EQ(share[0] + share[1], 38 * row_bytes);
  ASSERT_EQ(share[0], share[1]) << "size-balanced: 19 rows on each ps";
  auto requests = [&](int64_t request_bytes) {
    return (*PsClient::Create(plan, {"w", "b"}, transport, 0, 1, request_bytes))
        ->num_dense_requests();
  };
  // 19 rows against one wave of 4 requests of 4 rows: beyond it, so
  // requests of 4 rows, 5 per ps.
  EXPECT_EQ(requests(4 * row_bytes), 2 * 5);
  // Against one wave of 4 requests of 5 rows: within it, so requests of
  // up to 10 rows, 2 per ps (not 4 of 5).
  EXPECT_EQ(requests(5 * row_bytes), 2 * 2);
}

TEST_F(DensePiecesTest, MissingPiece_IsFailedPrecondition) {
  proto::PlacementPlan plan;
  auto transport = Start(Specs(3 * kH * sizeof(float)), &plan);
  plan.mutable_variables()->DeleteSubrange(2, 1);
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(plan, {"w", "b"}, transport, 0, 1);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(client.status().message()).find("w"), std::string::npos)
      << client.status();
}

INSTANTIATE_TEST_SUITE_P(Routings, PsClientTest, ::testing::Values(proto::MOD, proto::DIV),
                         [](const auto& info) { return proto::Routing_Name(info.param); });

}  // namespace
}  // namespace pst::client
