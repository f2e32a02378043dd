// VariableStore (variable_store.h) with dense calls in bf16
// (TrainingConfig.wire_dtype, common/bf16.h): a bf16 gradient is applied as
// exactly the float32 gradient it stands for, in ASYNC and SYNC, from the
// tensor's data and from receive slices cut anywhere; answers in bf16 are
// the stored values rounded; bad dtypes, sizes and non-finite values are
// refused before anything changes. And top-k gradients
// (DT_SPARSE_FLOAT32, common/sparse_gradient.h): applied as the dense
// gradient with zeros elsewhere; malformed ones refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "common/sparse_gradient.h"
#include "ps_server/store/variable_store.h"
#include "ps_server/store/variable_store_test_util.h"

namespace pst::ps {
namespace {

constexpr int64_t kBig = 3 * common::kFloatBlock + 5;  // several blocks, and a short one

proto::CreateVariablesRequest AdamRequest(proto::SyncMode mode = proto::ASYNC) {
  proto::CreateVariablesRequest request;
  *request.add_variables() = Spec("w", {2, 3});
  *request.add_variables() = Spec("big", {kBig});
  request.mutable_optimizer()->set_name("adam");
  request.mutable_optimizer()->set_learning_rate(0.01f);
  request.mutable_optimizer()->set_beta1(0.9f);
  request.mutable_optimizer()->set_beta2(0.999f);
  request.mutable_optimizer()->set_epsilon(1e-7f);
  request.mutable_sync()->set_mode(mode);
  if (mode == proto::SYNC) request.mutable_sync()->set_num_workers(2);
  return request;
}

std::vector<float> Gradient(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 3);
  std::vector<float> out(n);
  for (float& x : out) x = g(rng);
  return out;
}

std::vector<float> Rounded(const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = common::Bf16ToFloat(common::FloatToBf16(values[i]));
  }
  return out;
}

std::string Bf16Bytes(const std::vector<float>& values) {
  std::string out(values.size() * 2, '\0');
  common::EncodeBf16(values, out.data());
  return out;
}

// A gradient tensor of `shape` in `dtype` with `data` as its payload.
void AddWireGradient(proto::PushRequest* push, const std::string& name, std::vector<int64_t> shape,
                     proto::DType dtype, std::string data) {
  push->add_names(name);
  proto::Tensor* t = push->add_gradients();
  t->set_dtype(dtype);
  for (int64_t d : shape) t->add_shape(d);
  t->set_data(std::move(data));
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * 4);
  return out;
}

TEST(VariableStoreWireTest, Bf16Push_AppliesExactlyTheFloat32GradientItStandsFor) {
  VariableStore halves, floats;
  ASSERT_TRUE(halves.Create(AdamRequest()).ok());
  ASSERT_TRUE(floats.Create(AdamRequest()).ok());
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> w = Gradient(6, 10 + step), big = Gradient(kBig, 20 + step);
    proto::PushRequest reference;
    reference.set_step(step);
    AddGradient(&reference, "w", {2, 3}, Rounded(w));
    AddGradient(&reference, "big", {kBig}, Rounded(big));
    proto::PushResponse response;
    ASSERT_TRUE(floats.Push(reference, &response).ok());

    proto::PushRequest push;
    push.set_step(step);
    const std::string w_bytes = Bf16Bytes(w), big_bytes = Bf16Bytes(big);
    if (step == 1) {
      // In receive slices cut inside a bf16 value and across blocks.
      AddWireGradient(&push, "w", {2, 3}, proto::DT_BFLOAT16, "");
      AddWireGradient(&push, "big", {kBig}, proto::DT_BFLOAT16, "");
      const std::string_view whole(big_bytes);
      const VariableStore::Payloads payloads = {
          {std::string_view(w_bytes).substr(0, 5), std::string_view(w_bytes).substr(5)},
          {whole.substr(0, 4097), whole.substr(4097, 1), whole.substr(4098)}};
      ASSERT_TRUE(halves.Push(push, &response, &payloads).ok());
    } else {
      AddWireGradient(&push, "w", {2, 3}, proto::DT_BFLOAT16, w_bytes);
      AddWireGradient(&push, "big", {kBig}, proto::DT_BFLOAT16, big_bytes);
      ASSERT_TRUE(halves.Push(push, &response).ok());
    }
    for (const char* name : {"w", "big"}) {
      EXPECT_EQ(Bits(Values(halves, name)), Bits(Values(floats, name))) << step << " " << name;
    }
  }
}

TEST(VariableStoreWireTest, Sync_Bf16PushesOfTwoWorkers_AverageAsTheirFloat32Pushes) {
  VariableStore halves, floats;
  ASSERT_TRUE(halves.Create(AdamRequest(proto::SYNC)).ok());
  ASSERT_TRUE(floats.Create(AdamRequest(proto::SYNC)).ok());
  for (int worker = 0; worker < 2; ++worker) {
    const std::vector<float> w = Gradient(6, 30 + worker), big = Gradient(kBig, 40 + worker);
    proto::PushRequest reference, push;
    for (proto::PushRequest* r : {&reference, &push}) {
      r->set_worker_index(worker);
      r->set_step(0);
    }
    AddGradient(&reference, "w", {2, 3}, Rounded(w));
    AddGradient(&reference, "big", {kBig}, Rounded(big));
    AddWireGradient(&push, "w", {2, 3}, proto::DT_BFLOAT16, Bf16Bytes(w));
    AddWireGradient(&push, "big", {kBig}, proto::DT_BFLOAT16, Bf16Bytes(big));
    proto::PushResponse response;
    ASSERT_TRUE(floats.Push(reference, &response).ok());
    ASSERT_TRUE(halves.Push(push, &response).ok());
  }
  for (const char* name : {"w", "big"}) {
    EXPECT_EQ(Bits(Values(halves, name)), Bits(Values(floats, name))) << name;
  }
  EXPECT_EQ(halves.GetStats().pushes_applied, 2);
}

TEST(VariableStoreWireTest, AnswersInBf16_AreTheStoredValuesRounded) {
  VariableStore store;
  ASSERT_TRUE(store.Create(AdamRequest()).ok());
  // A pull.
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add()->assign("big");
  proto::PullResponse pulled;
  ASSERT_TRUE(store.Pull(names, &pulled, proto::DT_BFLOAT16).ok());
  ASSERT_EQ(pulled.values_size(), 1);
  EXPECT_EQ(pulled.values(0).dtype(), proto::DT_BFLOAT16);
  EXPECT_EQ(pulled.values(0).shape(0), kBig);
  EXPECT_EQ(pulled.values(0).data(), Bf16Bytes(Values(store, "big")));
  // A PushPull's answer, made as the push is applied, in ASYNC.
  proto::PushPullRequest request;
  request.mutable_push()->set_wire_dtype(proto::DT_BFLOAT16);
  AddWireGradient(request.mutable_push(), "big", {kBig}, proto::DT_BFLOAT16,
                  Bf16Bytes(Gradient(kBig, 5)));
  AddGradient(request.mutable_push(), "w", {2, 3}, {1, 2, 3, 4, 5, 6});  // float32 beside it
  proto::PullResponse answer;
  ASSERT_TRUE(store.PushPull(request, &answer).ok());
  ASSERT_EQ(answer.values_size(), 2);
  EXPECT_EQ(answer.values(0).dtype(), proto::DT_BFLOAT16);
  EXPECT_EQ(answer.values(0).data(), Bf16Bytes(Values(store, "big")));
  EXPECT_EQ(answer.values(1).data(), Bf16Bytes(Values(store, "w")));
  // The float32 answer is unchanged.
  request.mutable_push()->clear_wire_dtype();
  request.mutable_push()->set_step(1);
  ASSERT_TRUE(store.PushPull(request, &answer).ok());
  EXPECT_EQ(answer.values(1).dtype(), proto::DT_FLOAT32);
  EXPECT_EQ(answer.values(1).data(), Bytes(Values(store, "w")));
}

TEST(VariableStoreWireTest, BadDtypesSizesAndValues_AreRefused_AndChangeNothing) {
  VariableStore store;
  proto::CreateVariablesRequest create = AdamRequest();
  ASSERT_TRUE(store.Create(create).ok());
  const std::vector<float> w0 = Values(store, "w");
  const std::vector<float> six = {1, 2, 3, 4, 5, 6};
  struct Case {
    const char* what;
    proto::PushRequest push;
    const char* says;
  };
  std::vector<Case> cases(5);
  cases[0].what = "a float32 payload under a bf16 header";
  AddWireGradient(&cases[0].push, "w", {2, 3}, proto::DT_BFLOAT16, Bytes(six));
  cases[0].says = "expected 12 for shape [2, 3] in DT_BFLOAT16";
  cases[1].what = "a NaN in bf16";
  std::vector<float> nan = six;
  nan[4] = NAN;
  AddWireGradient(&cases[1].push, "w", {2, 3}, proto::DT_BFLOAT16, Bf16Bytes(nan));
  cases[1].says = "NaN at element 4";
  cases[2].what = "an Inf in bf16";
  std::vector<float> inf = six;
  inf[0] = -INFINITY;
  AddWireGradient(&cases[2].push, "w", {2, 3}, proto::DT_BFLOAT16, Bf16Bytes(inf));
  cases[2].says = "Inf at element 0";
  cases[3].what = "an unknown gradient dtype";
  AddWireGradient(&cases[3].push, "w", {2, 3}, static_cast<proto::DType>(9), Bf16Bytes(six));
  cases[3].says = "dtype 9, expected DT_FLOAT32, DT_BFLOAT16 or DT_SPARSE_FLOAT32";
  cases[4].what = "an unknown answer dtype";
  AddWireGradient(&cases[4].push, "w", {2, 3}, proto::DT_BFLOAT16, Bf16Bytes(six));
  cases[4].push.set_wire_dtype(static_cast<proto::DType>(9));
  cases[4].says = "push's wire_dtype: dtype 9, expected DT_FLOAT32 or DT_BFLOAT16";
  for (const Case& c : cases) {
    proto::PushResponse response;
    const absl::Status status = store.Push(c.push, &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << status;
    EXPECT_NE(status.message().find(c.says), std::string::npos) << c.what << ": " << status;
    EXPECT_EQ(Values(store, "w"), w0) << c.what;
  }
  google::protobuf::RepeatedPtrField<std::string> names;
  proto::PullResponse pulled;
  const absl::Status pull = store.Pull(names, &pulled, static_cast<proto::DType>(9));
  EXPECT_EQ(pull.code(), absl::StatusCode::kInvalidArgument) << pull;
  EXPECT_EQ(store.GetStats().pushes_applied, 0);
}

// The payload of `dense`'s top-k entries (no residual before).
std::string TopK(const std::vector<float>& dense, double ratio) {
  std::vector<float> zeros(dense.size()), next(dense.size()), payload;
  common::CompressTopK(dense, zeros, common::TopKCount(dense.size(), ratio), next, &payload);
  return std::string(reinterpret_cast<const char*>(payload.data()), payload.size() * 4);
}

// What a top-k payload stands for.
std::vector<float> Expanded(const std::string& payload, size_t n) {
  std::vector<float> dense(n);
  const std::string_view view(payload);
  EXPECT_TRUE(common::ExpandSparseGradient(common::PayloadParts(&view, 1), dense).ok());
  return dense;
}

TEST(VariableStoreWireTest, TopKPush_AppliesAsTheDenseGradientWithZeros_AsyncAndSync) {
  for (proto::SyncMode mode : {proto::ASYNC, proto::SYNC}) {
    VariableStore sparse, dense;
    ASSERT_TRUE(sparse.Create(AdamRequest(mode)).ok());
    ASSERT_TRUE(dense.Create(AdamRequest(mode)).ok());
    const int workers = mode == proto::SYNC ? 2 : 1;
    for (int step = 0; step < 2; ++step) {
      for (int worker = 0; worker < workers; ++worker) {
        const std::vector<float> w = Gradient(6, 50 + step + worker);
        const std::vector<float> big = Gradient(kBig, 60 + step + worker);
        const std::string w_top = TopK(w, 0.5), big_top = TopK(big, 0.01);
        proto::PushRequest reference, push;
        for (proto::PushRequest* r : {&reference, &push}) {
          r->set_worker_index(worker);
          r->set_step(step);
        }
        AddGradient(&reference, "w", {2, 3}, Expanded(w_top, 6));
        AddGradient(&reference, "big", {kBig}, Expanded(big_top, kBig));
        AddWireGradient(&push, "w", {2, 3}, proto::DT_SPARSE_FLOAT32, w_top);
        // In receive slices cut inside an entry.
        AddWireGradient(&push, "big", {kBig}, proto::DT_SPARSE_FLOAT32, "");
        const std::string_view whole(big_top);
        const VariableStore::Payloads payloads = {{std::string_view(w_top)},
                                                  {whole.substr(0, 13), whole.substr(13)}};
        proto::PushResponse response;
        ASSERT_TRUE(dense.Push(reference, &response).ok());
        const absl::Status pushed = sparse.Push(push, &response, &payloads);
        ASSERT_TRUE(pushed.ok()) << pushed;
      }
    }
    for (const char* name : {"w", "big"}) {
      EXPECT_EQ(Bits(Values(sparse, name)), Bits(Values(dense, name))) << mode << " " << name;
    }
  }
}

TEST(VariableStoreWireTest, BadTopKPushes_AreRefused_AndChangeNothing) {
  VariableStore store;
  ASSERT_TRUE(store.Create(AdamRequest()).ok());
  const std::vector<float> w0 = Values(store, "w");
  auto entries = [](std::vector<uint32_t> indices, std::vector<float> values) {
    std::string out(indices.size() * 4, '\0');
    std::memcpy(out.data(), indices.data(), out.size());
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    return out;
  };
  struct Case {
    const char* what;
    std::string data;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"an index past the tensor", entries({1, 6}, {1, 2}), "past the tensor's 6 elements"},
      {"indices out of order", entries({3, 1}, {1, 2}), "not above the one before (3)"},
      {"a repeated index", entries({2, 2}, {1, 2}), "not above the one before (2)"},
      {"more entries than elements", entries({0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1, 1}),
       "7 entries for a tensor of 6"},
      {"a cut entry", entries({1}, {1}).substr(0, 7), "whole number of 8-byte entries"},
      {"a NaN value", entries({0, 4}, {1, NAN}), "NaN at element 4"},
  };
  for (const Case& c : cases) {
    proto::PushRequest push;
    AddWireGradient(&push, "w", {2, 3}, proto::DT_SPARSE_FLOAT32, c.data);
    proto::PushResponse response;
    const absl::Status status = store.Push(push, &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << status;
    EXPECT_NE(status.message().find(c.says), std::string::npos) << c.what << ": " << status;
    EXPECT_NE(status.message().find("gradient for 'w'"), std::string::npos) << status;
    EXPECT_EQ(Values(store, "w"), w0) << c.what;
  }
  EXPECT_EQ(store.GetStats().pushes_applied, 0);
}

}  // namespace
}  // namespace pst::ps
