#include "ps_server/variable_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "common/tensor_util.h"

namespace pst::ps {
namespace {

proto::VariableSpec Spec(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(1.0f);
  spec.mutable_initializer()->set_seed(3);
  return spec;
}

proto::CreateVariablesRequest CreateRequest(float lr = 0.5f) {
  proto::CreateVariablesRequest request;
  *request.add_variables() = Spec("w", {2, 3});
  *request.add_variables() = Spec("b", {3});
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(lr);
  return request;
}

void AddGradient(proto::PushRequest* push, const std::string& name, std::vector<int64_t> shape,
                 std::vector<float> values) {
  push->add_names(name);
  common::PackFloats(values, common::Shape(shape.begin(), shape.end()), push->add_gradients());
}

std::vector<float> Values(const VariableStore& store, const std::string& name) {
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add()->assign(name);
  proto::PullResponse response;
  EXPECT_TRUE(store.Pull(names, &response).ok());
  std::vector<float> out(response.values(0).data().size() / sizeof(float));
  common::UnpackFloats(response.values(0), out);
  return out;
}

class VariableStoreTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(*store_.Create(CreateRequest()), 2); }
  VariableStore store_;
};

TEST_F(VariableStoreTest, Push_AppliesSgdToEachVariable) {
  const std::vector<float> w0 = Values(store_, "w");
  const std::vector<float> b0 = Values(store_, "b");
  proto::PushRequest push;
  AddGradient(&push, "w", {2, 3}, {1, 2, 3, 4, 5, 6});
  AddGradient(&push, "b", {3}, {-1, 0, 1});
  proto::PushResponse response;
  ASSERT_TRUE(store_.Push(push, &response).ok());
  EXPECT_EQ(response.versions_size(), 2);
  EXPECT_EQ(response.versions(0), 1);
  const std::vector<float> w1 = Values(store_, "w");
  const std::vector<float> b1 = Values(store_, "b");
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f * (i + 1));
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(b1[i], b0[i] - 0.5f * (i - 1));
  EXPECT_EQ(store_.GetStats().pushes_applied, 1);
}

TEST_F(VariableStoreTest, Push_BadRequests_ChangeNothing) {
  const std::vector<float> w0 = Values(store_, "w");
  const std::vector<float> b0 = Values(store_, "b");
  struct Case {
    const char* what;
    proto::PushRequest push;
    absl::StatusCode code;
  };
  std::vector<Case> cases;
  {
    Case c{"unknown variable", {}, absl::StatusCode::kNotFound};
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    AddGradient(&c.push, "nope", {3}, {1, 1, 1});
    cases.push_back(c);
  }
  {
    Case c{"wrong shape", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    AddGradient(&c.push, "w", {3, 2}, {1, 1, 1, 1, 1, 1});
    cases.push_back(c);
  }
  {
    Case c{"short payload", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "w", {2, 3}, {1, 1, 1, 1, 1, 1});
    c.push.mutable_gradients(0)->mutable_data()->resize(5);
    cases.push_back(c);
  }
  {
    Case c{"wrong dtype", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    c.push.mutable_gradients(0)->set_dtype(proto::DT_INVALID);
    cases.push_back(c);
  }
  {
    Case c{"NaN", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    AddGradient(&c.push, "w", {2, 3}, {1, 1, NAN, 1, 1, 1});
    cases.push_back(c);
  }
  {
    Case c{"Inf", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "b", {3}, {1, INFINITY, 1});
    cases.push_back(c);
  }
  {
    Case c{"duplicate name", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    cases.push_back(c);
  }
  {
    Case c{"names without gradients", {}, absl::StatusCode::kInvalidArgument};
    AddGradient(&c.push, "b", {3}, {1, 1, 1});
    c.push.add_names("w");
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    proto::PushResponse response;
    absl::Status status = store_.Push(c.push, &response);
    EXPECT_EQ(status.code(), c.code) << c.what << ": " << status;
    EXPECT_FALSE(status.message().empty()) << c.what;
  }
  EXPECT_EQ(Values(store_, "w"), w0);
  EXPECT_EQ(Values(store_, "b"), b0);
  EXPECT_EQ(store_.GetStats().pushes_applied, 0);
}

TEST_F(VariableStoreTest, Pull_UnknownName_IsNotFound) {
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add()->assign("missing");
  proto::PullResponse response;
  absl::Status status = store_.Pull(names, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(status.message()).find("missing"), std::string::npos);
}

TEST_F(VariableStoreTest, Pull_NoNames_ReturnsAllSortedByName) {
  proto::PullResponse response;
  ASSERT_TRUE(store_.Pull({}, &response).ok());
  ASSERT_EQ(response.names_size(), 2);
  EXPECT_EQ(response.names(0), "b");
  EXPECT_EQ(response.names(1), "w");
}

TEST_F(VariableStoreTest, Create_SameSpecAgain_IsIdempotent) {
  const std::vector<float> w0 = Values(store_, "w");
  EXPECT_EQ(*store_.Create(CreateRequest()), 0);
  EXPECT_EQ(Values(store_, "w"), w0);
}

TEST_F(VariableStoreTest, Create_Conflicts_AreRejectedAndCreateNothing) {
  proto::CreateVariablesRequest other_shape = CreateRequest();
  *other_shape.add_variables() = Spec("new_var", {4});
  other_shape.mutable_variables(0)->set_shape(0, 5);
  EXPECT_EQ(store_.Create(other_shape).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_.GetStats().num_variables, 2);  // new_var was not created

  EXPECT_EQ(store_.Create(CreateRequest(/*lr=*/0.1f)).status().code(),
            absl::StatusCode::kFailedPrecondition);

  proto::CreateVariablesRequest bad = CreateRequest();
  bad.clear_variables();
  *bad.add_variables() = Spec("x", {3});
  *bad.add_variables() = Spec("y", {0});
  EXPECT_EQ(store_.Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.GetStats().num_variables, 2);  // x was not created either
}

TEST(VariableStoreStandaloneTest, Push_BeforeCreate_IsFailedPrecondition) {
  VariableStore store;
  proto::PushRequest push;
  AddGradient(&push, "w", {1}, {1});
  proto::PushResponse response;
  EXPECT_EQ(store.Push(push, &response).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(VariableStoreStandaloneTest, Create_TooLargeVariable_IsInvalidArgument) {
  VariableStore::Options options;
  options.max_variable_elements = 100;
  VariableStore store(options);
  proto::CreateVariablesRequest request = CreateRequest();
  *request.add_variables() = Spec("big", {11, 10});
  EXPECT_EQ(store.Create(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(VariableStoreTest, ConcurrentPushes_AreEachAppliedOnce) {
  const std::vector<float> b0 = Values(store_, "b");
  constexpr int kThreads = 4, kPushes = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this] {
      for (int i = 0; i < kPushes; ++i) {
        proto::PushRequest push;
        AddGradient(&push, "b", {3}, {0.001f, 0.002f, 0.004f});
        proto::PushResponse response;
        ASSERT_TRUE(store_.Push(push, &response).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<float> b1 = Values(store_, "b");
  const float steps = kThreads * kPushes;
  EXPECT_NEAR(b1[0], b0[0] - 0.5f * 0.001f * steps, 1e-3);
  EXPECT_NEAR(b1[2], b0[2] - 0.5f * 0.004f * steps, 1e-3);
  proto::PullResponse response;
  ASSERT_TRUE(store_.Pull({}, &response).ok());
  EXPECT_EQ(response.versions(0), kThreads * kPushes);
}

}  // namespace
}  // namespace pst::ps
