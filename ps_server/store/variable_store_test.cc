#include "ps_server/store/variable_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
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

std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

TEST(VariableStoreInitialValuesTest, Create_WithValues_TakesThemInsteadOfTheInitializer) {
  VariableStore store;
  proto::CreateVariablesRequest request = CreateRequest();  // w [2, 3], b [3]
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  *request.add_initial_values() = Bytes(w);
  request.add_initial_values();  // b: its initializer
  ASSERT_EQ(*store.Create(request), 2);
  EXPECT_EQ(Values(store, "w"), w);
  VariableStore plain;
  ASSERT_TRUE(plain.Create(CreateRequest()).ok());
  EXPECT_EQ(Values(store, "b"), Values(plain, "b"));
}

TEST(VariableStoreInitialValuesTest, Create_ExistingVariable_KeepsItsValues) {
  VariableStore store;
  ASSERT_TRUE(store.Create(CreateRequest()).ok());
  const std::vector<float> w0 = Values(store, "w");
  proto::CreateVariablesRequest again = CreateRequest();
  *again.add_initial_values() = Bytes({1, 2, 3, 4, 5, 6});
  again.add_initial_values();
  EXPECT_EQ(*store.Create(again), 0);
  EXPECT_EQ(Values(store, "w"), w0);
}

TEST(VariableStoreInitialValuesTest, Create_BadValues_AreInvalidAndCreateNothing) {
  auto expect_refused = [](proto::CreateVariablesRequest request, const std::string& part) {
    VariableStore store;
    absl::Status status = store.Create(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(part), std::string::npos) << status;
    EXPECT_EQ(store.GetStats().num_variables, 0);
  };
  proto::CreateVariablesRequest one_short = CreateRequest();
  *one_short.add_initial_values() = Bytes({1, 2, 3, 4, 5, 6});
  expect_refused(one_short, "1 entries for 2 variables");
  proto::CreateVariablesRequest wrong_size = CreateRequest();
  *wrong_size.add_initial_values() = Bytes({1, 2, 3, 4, 5});
  wrong_size.add_initial_values();
  expect_refused(wrong_size, "variable 'w': 20 bytes");
  proto::CreateVariablesRequest odd_bytes = CreateRequest();
  odd_bytes.add_initial_values();
  *odd_bytes.add_initial_values() = std::string(13, '\0');
  expect_refused(odd_bytes, "variable 'b': 13 bytes");
  proto::CreateVariablesRequest nan = CreateRequest();
  *nan.add_initial_values() = Bytes({1, 2, std::nanf(""), 4, 5, 6});
  nan.add_initial_values();
  expect_refused(nan, "not finite");
  proto::CreateVariablesRequest hash = CreateRequest();
  hash.clear_variables();
  proto::VariableSpec table = Spec("h", {0, 2});
  table.set_variable("h");
  table.add_full_shape(0);
  table.add_full_shape(2);
  table.set_num_partitions(1);
  table.set_routing(proto::HASH);
  table.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  *hash.add_variables() = table;
  *hash.add_initial_values() = Bytes({1, 2});
  expect_refused(hash, "hash embedding");
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

// PushPull in ASYNC mode answers with the values its push left, taken while
// applying it: they must be exactly what a Pull right after returns, for
// gradients read from receive slices cut anywhere (several L1 blocks, a
// float straddling two slices), from the tensors themselves, and with rows
// skipped for NaN.
TEST(VariableStorePushPullTest, Async_AnswersExactlyTheValuesAPullSeesAfterIt) {
  VariableStore store;
  proto::CreateVariablesRequest create = CreateRequest();
  const int64_t big = 3 * common::kFloatBlock + 5;
  *create.add_variables() = Spec("big", {big});
  create.mutable_optimizer()->set_skip_nonfinite(true);
  ASSERT_EQ(*store.Create(create), 3);

  std::vector<float> big_grad(big);
  for (int64_t i = 0; i < big; ++i) big_grad[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  const std::string big_bytes(reinterpret_cast<const char*>(big_grad.data()), big * 4);
  const std::string_view whole(big_bytes);
  const std::vector<float> w_grad = {1, 2, 3, 4, 5, 6};
  const std::string_view w_bytes(reinterpret_cast<const char*>(w_grad.data()), 24);
  const VariableStore::Payloads payloads = {
      {w_bytes}, {whole.substr(0, 4099), whole.substr(4099, 2), whole.substr(4101)}};
  for (int round = 0; round < 3; ++round) {
    const std::vector<float> w0 = Values(store, "w"), big0 = Values(store, "big");
    proto::PushPullRequest request;
    proto::PushRequest* push = request.mutable_push();
    push->set_worker_index(0);
    push->set_step(round);
    proto::PullResponse answer;
    absl::Status status;
    if (round == 0) {  // gradients in receive slices
      AddGradient(push, "w", {2, 3}, {});
      AddGradient(push, "big", {big}, {});
      status = absl::UnknownError("not answered");
      store.PushPullWhenReady(&request, &answer, [&](absl::Status s) { status = s; }, &payloads);
    } else {  // gradients in the tensors; round 2: a NaN row is skipped
      AddGradient(push, "w", {2, 3}, {1, 2, 3, round == 2 ? NAN : 4.0f, 5, 6});
      AddGradient(push, "big", {big}, big_grad);
      status = store.PushPull(request, &answer);
    }
    ASSERT_TRUE(status.ok()) << round << ": " << status;
    ASSERT_EQ(answer.names_size(), 2);
    EXPECT_EQ(answer.names(0), "w");
    EXPECT_EQ(answer.names(1), "big");
    ASSERT_EQ(answer.versions_size(), 2);
    EXPECT_EQ(answer.versions(0), round + 1);
    EXPECT_EQ(answer.versions(1), round + 1);
    EXPECT_EQ(answer.values(1).shape(0), big);
    std::vector<float> w(6), big1(big);
    common::UnpackFloats(answer.values(0), w);
    common::UnpackFloats(answer.values(1), big1);
    EXPECT_EQ(w, Values(store, "w")) << round;
    EXPECT_EQ(big1, Values(store, "big")) << round;
    for (int i = 0; i < 6; ++i) {
      const float want = round == 2 && i >= 3 ? w0[i] : w0[i] - 0.5f * (i + 1);
      EXPECT_FLOAT_EQ(w[i], want) << round << " " << i;
    }
    for (int64_t i = 0; i < big; i += 1000) {
      EXPECT_FLOAT_EQ(big1[i], big0[i] - 0.5f * big_grad[i]) << i;
    }
  }
  EXPECT_EQ(store.GetStats().nonfinite_skipped, 1);
}

// A retried PushPull is not applied again, and is still answered with the
// variables' values.
TEST(VariableStorePushPullTest, Async_RepeatedPush_AnswersTheValuesWithoutApplying) {
  VariableStore store;
  ASSERT_EQ(*store.Create(CreateRequest()), 2);
  proto::PushPullRequest request;
  proto::PushRequest* push = request.mutable_push();
  push->set_worker_index(1);
  push->set_incarnation(9);
  push->set_step(4);
  AddGradient(push, "b", {3}, {1, 1, 1});
  proto::PullResponse first, second;
  ASSERT_TRUE(store.PushPull(request, &first).ok());
  ASSERT_TRUE(store.PushPull(request, &second).ok());
  EXPECT_EQ(store.GetStats().duplicates_ignored, 1);
  ASSERT_EQ(second.values_size(), 1);
  EXPECT_EQ(second.versions(0), 1);
  EXPECT_EQ(second.values(0).data(), first.values(0).data());
  std::vector<float> b(3);
  common::UnpackFloats(second.values(0), b);
  EXPECT_EQ(b, Values(store, "b"));
}

// ---------------------------------------------------------------------------
// Row access: PullRows / PushRows, partitions, hash embeddings.

proto::Initializer Uniform(uint64_t seed) {
  proto::Initializer init;
  init.set_kind(proto::Initializer::UNIFORM);
  init.set_scale(1.0f);
  init.set_seed(seed);
  return init;
}

// Partition p of P of `full` ([N, dims...]) under MOD or DIV routing, with
// TensorFlow's layout, written here independently of common/partition.
proto::VariableSpec PartSpec(const proto::VariableSpec& full, int p, int num,
                             proto::Routing routing) {
  const int64_t n = full.shape(0);
  const int64_t size = n / num + (p < n % num ? 1 : 0);
  proto::VariableSpec spec = full;
  spec.set_name(full.name() + "/part_" + std::to_string(p));
  spec.set_variable(full.name());
  *spec.mutable_full_shape() = full.shape();
  spec.set_shape(0, size);
  spec.set_partition(p);
  spec.set_num_partitions(num);
  spec.set_routing(routing);
  if (routing == proto::MOD) {
    spec.set_row_offset(p);
    spec.set_row_stride(num);
  } else {
    spec.set_row_offset(p * (n / num) + std::min<int64_t>(p, n % num));
    spec.set_row_stride(1);
  }
  return spec;
}

proto::VariableSpec HashSpec(const std::string& variable, int64_t dim, int p, int num,
                             int admit_after = 0) {
  proto::VariableSpec spec;
  spec.set_name(variable + "/part_" + std::to_string(p));
  spec.set_variable(variable);
  spec.set_dtype(proto::DT_FLOAT32);
  spec.add_shape(0);
  spec.add_shape(dim);
  *spec.mutable_initializer() = Uniform(11);
  spec.set_partition(p);
  spec.set_num_partitions(num);
  spec.set_routing(proto::HASH);
  spec.set_admit_after(admit_after);
  return spec;
}

void AddRows(proto::PushRowsRequest* push, const std::string& name, std::vector<int64_t> ids,
             int64_t dim, std::vector<float> grads) {
  proto::RowIds* rows = push->add_rows();
  rows->set_name(name);
  for (int64_t id : ids) rows->add_ids(id);
  common::Shape shape;
  shape.Add(static_cast<int64_t>(ids.size()));
  shape.Add(dim);
  common::PackFloats(grads, shape, push->add_gradients());
}

absl::StatusOr<std::vector<float>> PullRowsOf(const VariableStore& store, const std::string& name,
                                              std::vector<int64_t> ids) {
  proto::PullRowsRequest request;
  proto::RowIds* rows = request.add_rows();
  rows->set_name(name);
  for (int64_t id : ids) rows->add_ids(id);
  proto::PullRowsResponse response;
  absl::Status status = store.PullRows(request, &response);
  if (!status.ok()) return status;
  std::vector<float> out(response.values(0).data().size() / sizeof(float));
  common::UnpackFloats(response.values(0), out);
  return out;
}

// Stores the rows of hash ids `ids` (a push of zero gradients: reads store
// no row).
absl::Status MakeHashRows(VariableStore& store, const std::string& name, std::vector<int64_t> ids,
                          int64_t dim) {
  proto::PushRowsRequest push;
  AddRows(&push, name, ids, dim, std::vector<float>(ids.size() * dim, 0.0f));
  proto::PushRowsResponse response;
  return store.PushRows(push, &response);
}

// Everything a dense Pull sees (values and versions of every non-hash
// variable), plus the store's counters.
struct Snapshot {
  proto::PullResponse pulled;
  int64_t pushes_applied;
  int64_t hash_rows;
  bool operator==(const Snapshot& o) const {
    return pulled.SerializeAsString() == o.pulled.SerializeAsString() &&
           pushes_applied == o.pushes_applied && hash_rows == o.hash_rows;
  }
};
Snapshot Snap(const VariableStore& store) {
  Snapshot snap;
  EXPECT_TRUE(store.Pull({}, &snap.pulled).ok());
  snap.pushes_applied = store.GetStats().pushes_applied;
  snap.hash_rows = store.GetStats().hash_rows;
  return snap;
}

// A store with a whole variable "w" [6, 2], a rank-1 "b" [4], partitions 0
// and 1 of "emb" [7, 3] under MOD, partition 1 of "div" [7, 3] under DIV
// (ids [3, 5)), and partition 1 of 2 of the hash embedding "h" (dim 2).
proto::CreateVariablesRequest RowRequest(bool skip_nonfinite = false) {
  proto::CreateVariablesRequest request;
  *request.add_variables() = Spec("w", {6, 2});
  *request.add_variables() = Spec("b", {4});
  const proto::VariableSpec emb = Spec("emb", {7, 3});
  *request.add_variables() = PartSpec(emb, 0, 2, proto::MOD);
  *request.add_variables() = PartSpec(emb, 1, 2, proto::MOD);
  *request.add_variables() = PartSpec(Spec("div", {7, 3}), 1, 3, proto::DIV);
  *request.add_variables() = HashSpec("h", 2, 1, 2);
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(0.5f);
  request.mutable_optimizer()->set_skip_nonfinite(skip_nonfinite);
  return request;
}

class RowStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> created = store_.Create(RowRequest());
    ASSERT_TRUE(created.ok()) << created.status();
    ASSERT_EQ(*created, 6);
    // Make two hash rows, so bad pushes have something to leave alone.
    ASSERT_TRUE(MakeHashRows(store_, "h/part_1", {1, -1}, 2).ok());
  }

  // Runs a bad push and checks that it fails with `code` and a message
  // holding each of `needles`, and that nothing changed.
  void ExpectPushRejected(const proto::PushRowsRequest& push, absl::StatusCode code,
                          std::vector<std::string> needles) {
    const Snapshot before = Snap(store_);
    absl::StatusOr<std::vector<float>> hash_before = PullRowsOf(store_, "h/part_1", {1, -1});
    proto::PushRowsResponse response;
    absl::Status status = store_.PushRows(push, &response);
    EXPECT_EQ(status.code(), code) << status;
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(status.message()).find(needle), std::string::npos)
          << "'" << needle << "' not in: " << status.message();
    }
    EXPECT_TRUE(Snap(store_) == before) << "a rejected push changed the store: " << status;
    EXPECT_EQ(PullRowsOf(store_, "h/part_1", {1, -1}).value(), hash_before.value());
  }

  VariableStore store_;
};

TEST_F(RowStoreTest, PushRows_Sgd_UpdatesExactlyThePushedRows) {
  const std::vector<float> w0 = Values(store_, "w");
  const std::vector<float> b0 = Values(store_, "b");
  const std::vector<float> e0 = Values(store_, "emb/part_1");  // global rows 1, 3, 5
  const std::vector<float> other_part = Values(store_, "emb/part_0");
  const std::vector<float> d0 = Values(store_, "div/part_1");  // global rows 3, 4
  const std::vector<float> h0 = PullRowsOf(store_, "h/part_1", {1, -1}).value();
  const int64_t pushes_before = store_.GetStats().pushes_applied;  // SetUp's
  proto::PushRowsRequest push;
  AddRows(&push, "w", {4, 1}, 2, {1, 2, 3, 4});
  AddRows(&push, "b", {3}, 1, {-2});
  AddRows(&push, "emb/part_1", {5, 1}, 3, {1, 1, 1, 2, 2, 2});
  AddRows(&push, "div/part_1", {4}, 3, {4, 4, 4});
  AddRows(&push, "h/part_1", {-1}, 2, {2, -2});
  proto::PushRowsResponse response;
  ASSERT_TRUE(store_.PushRows(push, &response).ok());
  EXPECT_EQ(response.versions_size(), 5);
  // "h" had one push already: the one that stored its two rows in SetUp.
  for (int i = 0; i < response.versions_size(); ++i) {
    EXPECT_EQ(response.versions(i), i == 4 ? 2 : 1) << i;
  }
  EXPECT_EQ(response.rows_skipped(), 0);
  EXPECT_EQ(store_.GetStats().pushes_applied, pushes_before + 1);

  std::vector<float> w_want = w0;
  w_want[8] -= 0.5f * 1, w_want[9] -= 0.5f * 2, w_want[2] -= 0.5f * 3, w_want[3] -= 0.5f * 4;
  EXPECT_EQ(Values(store_, "w"), w_want);
  std::vector<float> b_want = b0;
  b_want[3] += 1.0f;
  EXPECT_EQ(Values(store_, "b"), b_want);
  std::vector<float> e_want = e0;
  for (int j = 0; j < 3; ++j) e_want[2 * 3 + j] -= 0.5f, e_want[j] -= 1.0f;
  EXPECT_EQ(Values(store_, "emb/part_1"), e_want);
  EXPECT_EQ(Values(store_, "emb/part_0"), other_part);
  std::vector<float> d_want = d0;
  for (int j = 0; j < 3; ++j) d_want[3 + j] -= 2.0f;
  EXPECT_EQ(Values(store_, "div/part_1"), d_want);
  std::vector<float> h_want = h0;
  h_want[2] -= 1.0f, h_want[3] += 1.0f;
  EXPECT_EQ(PullRowsOf(store_, "h/part_1", {1, -1}).value(), h_want);
}

TEST_F(RowStoreTest, PullRows_ReturnsRowsByGlobalIdWithVersions) {
  const std::vector<float> w = Values(store_, "w");
  EXPECT_EQ(PullRowsOf(store_, "w", {5, 0}).value(),
            (std::vector<float>{w[10], w[11], w[0], w[1]}));
  const std::vector<float> e = Values(store_, "emb/part_1");
  std::vector<float> want(e.begin() + 6, e.begin() + 9);  // global 5 = local 2
  want.insert(want.end(), e.begin(), e.begin() + 3);      // global 1 = local 0
  EXPECT_EQ(PullRowsOf(store_, "emb/part_1", {5, 1}).value(), want);
  const std::vector<float> d = Values(store_, "div/part_1");
  EXPECT_EQ(PullRowsOf(store_, "div/part_1", {4}).value(),
            std::vector<float>(d.begin() + 3, d.end()));
  EXPECT_EQ(PullRowsOf(store_, "b", {2}).value(), std::vector<float>{Values(store_, "b")[2]});

  proto::PullRowsRequest request;
  proto::RowIds* rows = request.add_rows();
  rows->set_name("b");
  rows->add_ids(0);
  request.add_rows()->set_name("w");  // no ids: a [0, 2] tensor
  proto::PullRowsResponse response;
  ASSERT_TRUE(store_.PullRows(request, &response).ok());
  ASSERT_EQ(response.values_size(), 2);
  EXPECT_EQ(common::ShapeString(response.values(0).shape()), "[1, 1]");
  EXPECT_EQ(common::ShapeString(response.values(1).shape()), "[0, 2]");
  EXPECT_EQ(response.versions(0), 0);
}

TEST_F(RowStoreTest, PushRows_IdOutOfRange_ChangesNothing) {
  {
    proto::PushRowsRequest push;
    AddRows(&push, "b", {0}, 1, {1});
    AddRows(&push, "w", {1, 6}, 2, {1, 1, 1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"id 6", "'w'", "[0, 6)"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "w", {-1}, 2, {1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"id -1", "'w'", "[0, 6)"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "emb/part_1", {7}, 3, {1, 1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"id 7", "'emb'", "[0, 7)"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "div/part_1", {-5}, 3, {1, 1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"id -5", "'div'", "[0, 7)"});
  }
}

TEST_F(RowStoreTest, PushRows_IdInWrongPartition_ChangesNothing) {
  {
    proto::PushRowsRequest push;
    AddRows(&push, "emb/part_1", {3, 2}, 3, {1, 1, 1, 1, 1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument,
                       {"id 2", "partition 0", "'emb/part_1'", "MOD"});
  }
  for (int64_t id : {2, 5}) {
    proto::PushRowsRequest push;
    AddRows(&push, "div/part_1", {id}, 3, {1, 1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument,
                       {"id " + std::to_string(id), "'div/part_1'", "[3, 5)"});
  }
  for (int64_t id : {2, -2}) {  // uint64(-2) is even: partition 0
    proto::PushRowsRequest push;
    AddRows(&push, "h/part_1", {id}, 2, {1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument,
                       {"id " + std::to_string(id), "partition 0", "'h/part_1'"});
  }
}

TEST_F(RowStoreTest, PushRows_RepeatedId_ChangesNothing) {
  proto::PushRowsRequest push;
  AddRows(&push, "w", {1, 3, 1}, 2, {1, 1, 1, 1, 1, 1});
  ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"id 1", "more than once", "'w'"});
}

TEST_F(RowStoreTest, PushRows_BadValuesTensor_ChangesNothing) {
  {
    proto::PushRowsRequest push;
    AddRows(&push, "w", {1, 2}, 2, {1, 1, 1, 1});
    push.mutable_gradients(0)->set_shape(1, 3);
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'w'", "[2, 3]", "[2, 2]"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "b", {1, 2}, 1, {1, 1});
    push.mutable_gradients(0)->clear_shape();
    push.mutable_gradients(0)->add_shape(2);  // rank 1: rows travel as [n, 1]
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'b'", "[2, 1]"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "w", {1}, 2, {1, 1});
    push.mutable_gradients(0)->set_dtype(proto::DT_INVALID);
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'w'", "dtype"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "w", {1}, 2, {1, 1});
    push.mutable_gradients(0)->mutable_data()->resize(7);
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'w'", "7 bytes"});
  }
}

TEST_F(RowStoreTest, PushRows_CountMismatchOrSameVariableTwice_ChangesNothing) {
  {
    proto::PushRowsRequest push;
    AddRows(&push, "w", {1}, 2, {1, 1});
    push.add_rows()->set_name("b");
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"2 row lists", "1 gradients"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "w", {1}, 2, {1, 1});
    AddRows(&push, "w", {2}, 2, {1, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'w'", "twice"});
  }
}

TEST_F(RowStoreTest, PushRows_NonFinite_ChangesNothing) {
  {
    proto::PushRowsRequest push;
    AddRows(&push, "b", {0}, 1, {1});
    AddRows(&push, "w", {1, 4}, 2, {1, 1, 1, NAN});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'w'", "NaN", "id 4"});
  }
  {
    proto::PushRowsRequest push;
    AddRows(&push, "h/part_1", {1}, 2, {-INFINITY, 1});
    ExpectPushRejected(push, absl::StatusCode::kInvalidArgument, {"'h/part_1'", "Inf", "id 1"});
  }
  EXPECT_EQ(store_.GetStats().nonfinite_skipped, 0);
}

TEST_F(RowStoreTest, PushRows_UnknownName_IsNotFoundAndChangesNothing) {
  proto::PushRowsRequest push;
  AddRows(&push, "w", {1}, 2, {1, 1});
  AddRows(&push, "nope", {1}, 2, {1, 1});
  ExpectPushRejected(push, absl::StatusCode::kNotFound, {"'nope'"});
}

TEST_F(RowStoreTest, PullRows_BadRequests_AreRejectedAndMakeNoRows) {
  const Snapshot before = Snap(store_);
  struct Case {
    std::string name;
    std::vector<int64_t> ids;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"w", {0, 6}, absl::StatusCode::kInvalidArgument},
      {"w", {2, 2}, absl::StatusCode::kInvalidArgument},
      {"emb/part_0", {1}, absl::StatusCode::kInvalidArgument},
      {"div/part_1", {5}, absl::StatusCode::kInvalidArgument},
      {"h/part_1", {3, 4}, absl::StatusCode::kInvalidArgument},
      {"h/part_1", {3, 3}, absl::StatusCode::kInvalidArgument},
      {"nope", {0}, absl::StatusCode::kNotFound},
  };
  for (const Case& c : cases) {
    proto::PullRowsRequest request;
    proto::RowIds* good = request.add_rows();  // a good hash lookup first: must not run
    good->set_name("h/part_1");
    good->add_ids(101);
    proto::RowIds* bad = request.add_rows();
    bad->set_name(c.name);
    for (int64_t id : c.ids) bad->add_ids(id);
    proto::PullRowsResponse response;
    EXPECT_EQ(store_.PullRows(request, &response).code(), c.code) << c.name;
  }
  EXPECT_TRUE(Snap(store_) == before);
  EXPECT_EQ(store_.GetStats().hash_rows, 2);
}

TEST_F(RowStoreTest, DenseAccessToHashVariable_IsFailedPrecondition) {
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add()->assign("h/part_1");
  proto::PullResponse pulled;
  absl::Status status = store_.Pull(names, &pulled);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(status.message()).find("PullRows"), std::string::npos) << status;

  proto::PushRequest push;
  AddGradient(&push, "h/part_1", {0, 2}, {});
  proto::PushResponse pushed;
  status = store_.Push(push, &pushed);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(status.message()).find("PushRows"), std::string::npos) << status;

  // Pulling everything leaves the hash variable out.
  ASSERT_TRUE(store_.Pull({}, &pulled).ok());
  EXPECT_EQ(pulled.names_size(), 5);
  for (const std::string& name : pulled.names()) EXPECT_NE(name, "h/part_1");
}

TEST_F(RowStoreTest, Stats_CountHashRowsAndElements) {
  VariableStore::Stats stats = store_.GetStats();
  EXPECT_EQ(stats.num_variables, 6);
  EXPECT_EQ(stats.hash_rows, 2);
  // w 12, b 4, emb 21, div 2 rows * 3, hash 2 rows * 2.
  EXPECT_EQ(stats.num_elements, 12 + 4 + 21 + 6 + 4);
  ASSERT_TRUE(PullRowsOf(store_, "h/part_1", {1, 3, 5}).ok());
  EXPECT_EQ(store_.GetStats().hash_rows, 2) << "a read stores no row";
  ASSERT_TRUE(MakeHashRows(store_, "h/part_1", {3, 5}, 2).ok());
  EXPECT_EQ(store_.GetStats().hash_rows, 4);
}

TEST(RowStoreSkipTest, SkipNonfinite_SkipsOnlyTheBadRowsAndCountsThem) {
  VariableStore store;
  ASSERT_TRUE(store.Create(RowRequest(/*skip_nonfinite=*/true)).ok());
  const std::vector<float> w0 = Values(store, "w");
  const std::vector<float> h0 = PullRowsOf(store, "h/part_1", {1, 3}).value();
  proto::PushRowsRequest push;
  AddRows(&push, "w", {0, 1, 2}, 2, {1, 1, NAN, 1, 2, 2});
  AddRows(&push, "h/part_1", {3, 1}, 2, {INFINITY, 0, 2, 2});
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(response.rows_skipped(), 2);
  std::vector<float> w_want = w0;
  w_want[0] -= 0.5f, w_want[1] -= 0.5f, w_want[4] -= 1.0f, w_want[5] -= 1.0f;
  EXPECT_EQ(Values(store, "w"), w_want);
  std::vector<float> h_want = h0;
  h_want[0] -= 1.0f, h_want[1] -= 1.0f;
  EXPECT_EQ(PullRowsOf(store, "h/part_1", {1, 3}).value(), h_want);
  EXPECT_EQ(store.GetStats().nonfinite_skipped, 2);

  // Dense pushes skip non-finite rows (slices along axis 0) the same way.
  proto::PushRequest dense;
  AddGradient(&dense, "w", {6, 2}, {0, 0, 0, 0, 0, 0, 0, 0, NAN, NAN, 2, 2});
  proto::PushResponse pushed;
  ASSERT_TRUE(store.Push(dense, &pushed).ok());
  w_want[10] -= 1.0f, w_want[11] -= 1.0f;
  EXPECT_EQ(Values(store, "w"), w_want);
  EXPECT_EQ(store.GetStats().nonfinite_skipped, 3);
}

// ---------------------------------------------------------------------------
// Partitions and creation.

TEST(PartitionStoreTest, Partitions_ConcatenatedEqualTheUnpartitionedVariable) {
  for (const proto::Initializer::Kind kind :
       {proto::Initializer::GLOROT_UNIFORM, proto::Initializer::NORMAL}) {
    for (const proto::Routing routing : {proto::MOD, proto::DIV}) {
      proto::VariableSpec full = Spec("emb", {10, 4});
      full.mutable_initializer()->set_kind(kind);
      VariableStore store;
      proto::CreateVariablesRequest request;
      request.mutable_optimizer()->set_name("sgd");
      request.mutable_optimizer()->set_learning_rate(0.1f);
      *request.add_variables() = full;
      constexpr int kParts = 3;
      for (int p = 0; p < kParts; ++p)
        *request.add_variables() = PartSpec(full, p, kParts, routing);
      absl::StatusOr<int> created = store.Create(request);
      ASSERT_TRUE(created.ok()) << created.status();

      const std::vector<float> whole = Values(store, "emb");
      std::vector<float> routed(whole.size(), NAN);
      for (int p = 0; p < kParts; ++p) {
        const proto::VariableSpec part = PartSpec(full, p, kParts, routing);
        const std::vector<float> values = Values(store, part.name());
        ASSERT_EQ(values.size(), static_cast<size_t>(part.shape(0) * 4));
        for (int64_t r = 0; r < part.shape(0); ++r) {
          const int64_t g = part.row_offset() + r * part.row_stride();
          std::copy_n(values.begin() + r * 4, 4, routed.begin() + g * 4);
        }
        // PullRows by global id agrees with the whole variable too.
        std::vector<int64_t> ids;
        for (int64_t r = 0; r < part.shape(0); ++r)
          ids.push_back(part.row_offset() + r * part.row_stride());
        std::vector<float> want;
        for (int64_t g : ids)
          want.insert(want.end(), whole.begin() + g * 4, whole.begin() + g * 4 + 4);
        EXPECT_EQ(PullRowsOf(store, part.name(), ids).value(), want) << part.name();
      }
      EXPECT_EQ(routed, whole) << proto::Routing_Name(routing) << " "
                               << proto::Initializer::Kind_Name(kind);
    }
  }
}

TEST(PartitionStoreTest, Create_BadPartitionSpecs_AreInvalidArgumentAndCreateNothing) {
  const proto::VariableSpec full = Spec("emb", {7, 3});
  struct Case {
    const char* what;
    proto::VariableSpec spec;
    const char* needle;
  };
  std::vector<Case> cases;
  cases.push_back({"zero rows without HASH", Spec("z", {0, 3}), "HASH"});
  {
    proto::VariableSpec s = HashSpec("h", 2, 2, 2);
    cases.push_back({"hash partition >= P", s, "partition"});
  }
  {
    proto::VariableSpec s = HashSpec("h", 2, 0, 0);
    cases.push_back({"hash with no partitions", s, "num_partitions"});
  }
  {
    proto::VariableSpec s = HashSpec("h", 2, 0, 1);
    s.set_shape(0, 5);
    cases.push_back({"hash with rows", s, "[0, dim"});
  }
  {
    proto::VariableSpec s = HashSpec("h", 2, 0, 1);
    s.mutable_initializer()->set_kind(proto::Initializer::GLOROT_UNIFORM);
    cases.push_back({"hash glorot without row count", s, "glorot"});
  }
  {
    proto::VariableSpec s = HashSpec("h", 2, 0, 1, /*admit_after=*/-1);
    cases.push_back({"negative admit_after", s, "admit_after"});
  }
  {
    proto::VariableSpec s = PartSpec(full, 1, 2, proto::MOD);
    s.set_shape(0, 4);
    cases.push_back({"MOD wrong size", s, "shape[0]"});
  }
  {
    proto::VariableSpec s = PartSpec(full, 1, 2, proto::MOD);
    s.set_row_stride(1);
    cases.push_back({"MOD wrong stride", s, "row_stride"});
  }
  {
    proto::VariableSpec s = PartSpec(full, 2, 3, proto::DIV);
    s.set_row_offset(4);
    cases.push_back({"DIV wrong offset", s, "row_offset"});
  }
  {
    proto::VariableSpec s = PartSpec(full, 0, 2, proto::DIV);
    s.set_full_shape(1, 4);
    cases.push_back({"full_shape other dim", s, "full_shape"});
  }
  {
    proto::VariableSpec s = PartSpec(full, 0, 2, proto::DIV);
    s.clear_full_shape();
    cases.push_back({"no full_shape", s, "full_shape"});
  }
  {
    proto::VariableSpec s = Spec("w", {3, 3});
    s.set_admit_after(5);
    cases.push_back({"admit_after without HASH", s, "admit_after"});
  }
  {
    proto::VariableSpec s = Spec("w", {3, 3});
    s.set_num_partitions(2);
    cases.push_back({"partition fields without routing", s, "routing"});
  }
  for (const Case& c : cases) {
    VariableStore store;
    proto::CreateVariablesRequest request = CreateRequest();
    *request.add_variables() = c.spec;
    absl::Status status = store.Create(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << status;
    EXPECT_NE(std::string(status.message()).find(c.needle), std::string::npos)
        << c.what << ": " << status;
    EXPECT_EQ(store.GetStats().num_variables, 0) << c.what;
  }
}

TEST(PartitionStoreTest, Create_PartitionSpecsAgain_IsIdempotent) {
  VariableStore store;
  proto::CreateVariablesRequest request = CreateRequest();
  *request.add_variables() = PartSpec(Spec("emb", {7, 3}), 1, 2, proto::MOD);
  *request.add_variables() = HashSpec("h", 4, 0, 1, 3);
  ASSERT_EQ(store.Create(request).value(), 4);
  EXPECT_EQ(store.Create(request).value(), 0);
}

// ---------------------------------------------------------------------------
// Hash embeddings.

proto::CreateVariablesRequest HashRequest(proto::VariableSpec spec) {
  proto::CreateVariablesRequest request;
  *request.add_variables() = std::move(spec);
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(0.5f);
  return request;
}

TEST(VariableStoreLimitsTest, TooManyIdsOrTooLargeAnAnswer_AreRefusedAndChangeNothing) {
  VariableStore::Options options;
  options.max_ids_per_request = 4;
  options.max_response_bytes = 3 * 2 * sizeof(float);  // three rows of "h"
  VariableStore store(options);
  ASSERT_TRUE(store.Create(HashRequest(HashSpec("h", 2, 0, 1))).ok());
  proto::PushRowsRequest push;
  AddRows(&push, "h/part_0", {1, 2, 3}, 2, std::vector<float>(6, 1.0f));
  AddRows(&push, "h/part_0", {4, 5}, 2, std::vector<float>(4, 1.0f));
  proto::PushRowsResponse pushed;
  absl::Status status = store.PushRows(push, &pushed);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("PushRows lists 5 ids; this ps takes at most 4"),
            std::string::npos)
      << status;
  EXPECT_EQ(store.GetStats().hash_rows, 0) << "no row made";
  EXPECT_EQ(store.GetStats().pushes_applied, 0);

  status = PullRowsOf(store, "h/part_0", {1, 2, 3, 4, 5}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // Four ids are allowed, but their rows would not fit in one answer.
  status = PullRowsOf(store, "h/part_0", {1, 2, 3, 4}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("pull fewer rows"), std::string::npos) << status;
  EXPECT_EQ(store.GetStats().hash_rows, 0) << "refused pulls touch no row";
  EXPECT_TRUE(PullRowsOf(store, "h/part_0", {1, 2, 3}).ok());
  EXPECT_EQ(store.GetStats().hash_rows, 0) << "a read stores no row";
}

TEST(VariableStoreStatsTest, TableRowsAndApplyTime) {
  VariableStore store;
  ASSERT_TRUE(store.Create(RowRequest()).ok());
  ASSERT_TRUE(MakeHashRows(store, "h/part_1", {1, 3, 5}, 2).ok());
  const double apply_before = store.GetStats().apply_seconds;
  VariableStore::Stats stats = store.GetStats();
  // "emb": both MOD partitions (4 + 3 rows); "div": the one partition of 2
  // rows held here; "h": 3 hash rows; whole variables are not tables.
  EXPECT_EQ(stats.table_rows["emb"], 7);
  EXPECT_EQ(stats.table_rows["div"], 2);
  EXPECT_EQ(stats.table_rows["h"], 3);
  EXPECT_FALSE(stats.table_rows.contains("w"));
  proto::PushRowsRequest push;
  AddRows(&push, "w", {0, 5}, 2, std::vector<float>(4, 1.0f));
  proto::PushRowsResponse pushed;
  ASSERT_TRUE(store.PushRows(push, &pushed).ok());
  EXPECT_GT(store.GetStats().apply_seconds, apply_before);
}

TEST(HashStoreTest, FirstTouch_CreatesDeterministicRows) {
  VariableStore a, b;
  ASSERT_TRUE(a.Create(HashRequest(HashSpec("h", 3, 0, 1))).ok());
  ASSERT_TRUE(b.Create(HashRequest(HashSpec("h", 3, 0, 1))).ok());
  const int64_t big = (int64_t{1} << 40) + 17;
  const std::vector<float> ra = PullRowsOf(a, "h/part_0", {5, -3, big}).value();
  // Another order, and through a push first: the initial values are the same.
  proto::PushRowsRequest push;
  AddRows(&push, "h/part_0", {big}, 3, {0, 0, 0});
  proto::PushRowsResponse response;
  ASSERT_TRUE(b.PushRows(push, &response).ok());
  const std::vector<float> rb = PullRowsOf(b, "h/part_0", {-3, big, 5}).value();
  ASSERT_EQ(ra.size(), 9u);
  EXPECT_EQ(std::vector<float>(ra.begin(), ra.begin() + 3),
            std::vector<float>(rb.begin() + 6, rb.end()));
  EXPECT_EQ(std::vector<float>(ra.begin() + 3, ra.begin() + 6),
            std::vector<float>(rb.begin(), rb.begin() + 3));
  EXPECT_EQ(std::vector<float>(ra.begin() + 6, ra.end()),
            std::vector<float>(rb.begin() + 3, rb.begin() + 6));
  EXPECT_NE(std::vector<float>(ra.begin(), ra.begin() + 3),
            std::vector<float>(ra.begin() + 3, ra.begin() + 6));
  EXPECT_EQ(a.GetStats().hash_rows, 0) << "reads store no row";
  EXPECT_EQ(b.GetStats().hash_rows, 1) << "the pushed row only";

  // A non-negative id starts as the same row of a dense variable with the
  // same initializer (documented).
  VariableStore dense;
  proto::VariableSpec spec = Spec("d", {8, 3});
  *spec.mutable_initializer() = Uniform(11);
  ASSERT_TRUE(dense.Create(HashRequest(spec)).ok());
  EXPECT_EQ(PullRowsOf(dense, "d", {5}).value(), std::vector<float>(ra.begin(), ra.begin() + 3));
}

TEST(HashStoreTest, Admission_ZerosAndDroppedGradientsUntilTheNthTouch) {
  VariableStore store, reference;
  ASSERT_TRUE(store.Create(HashRequest(HashSpec("h", 2, 0, 1, /*admit_after=*/3))).ok());
  ASSERT_TRUE(reference.Create(HashRequest(HashSpec("h", 2, 0, 1))).ok());
  const std::vector<float> initial = PullRowsOf(reference, "h/part_0", {42}).value();

  // Touch 1: a pull reads zeros.
  EXPECT_EQ(PullRowsOf(store, "h/part_0", {42}).value(), std::vector<float>(2, 0.0f));
  // Touch 2: a push's gradient is dropped (and counted).
  proto::PushRowsRequest push;
  AddRows(&push, "h/part_0", {42}, 2, {1, 1});
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(store.GetStats().unadmitted_dropped, 1);
  EXPECT_EQ(store.GetStats().hash_rows, 0);
  // Touch 3: admitted, read as its initial values (a read stores no row).
  EXPECT_EQ(PullRowsOf(store, "h/part_0", {42}).value(), initial);
  EXPECT_EQ(store.GetStats().hash_rows, 0);
  // From now on, gradients apply (the first push stores the row).
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(PullRowsOf(store, "h/part_0", {42}).value(),
            (std::vector<float>{initial[0] - 0.5f, initial[1] - 0.5f}));
  EXPECT_EQ(store.GetStats().unadmitted_dropped, 1);

  // Another id admitted by pushes alone: the 3rd push applies.
  proto::PushRowsRequest other;
  AddRows(&other, "h/part_0", {7}, 2, {2, 2});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store.PushRows(other, &response).ok());
  const std::vector<float> init7 = PullRowsOf(reference, "h/part_0", {7}).value();
  EXPECT_EQ(PullRowsOf(store, "h/part_0", {7}).value(),
            (std::vector<float>{init7[0] - 1.0f, init7[1] - 1.0f}));
  EXPECT_EQ(store.GetStats().unadmitted_dropped, 3);
}

TEST(HashStoreTest, Admission_InTheSmallestFilter_StillCountsTouches) {
  VariableStore::Options options;
  options.admission_filter_bytes = 8 << 10;  // 1024 counters a row
  VariableStore store(options);
  ASSERT_TRUE(store.Create(HashRequest(HashSpec("h", 1, 0, 1, /*admit_after=*/3))).ok());
  const std::vector<int64_t> ids = {10, 20, 30, 40, 50};
  for (int touch = 1; touch <= 2; ++touch) {
    EXPECT_EQ(PullRowsOf(store, "h/part_0", ids).value(), std::vector<float>(5, 0.0f))
        << "touch " << touch;
    EXPECT_EQ(store.GetStats().hash_rows, 0);
  }
  // The 3rd touch admits all five (a filter admits early, never late).
  const std::vector<float> third = PullRowsOf(store, "h/part_0", ids).value();
  EXPECT_EQ(store.GetStats().hash_rows, 0) << "a read stores no row";
  for (float v : third) EXPECT_NE(v, 0.0f);
  // Each admitted id's first push stores its row.
  ASSERT_TRUE(MakeHashRows(store, "h/part_0", ids, 1).ok());
  EXPECT_EQ(store.GetStats().hash_rows, 5);
}

TEST(HashStoreTest, RankOneHashVariable_HasOneElementRows) {
  VariableStore store;
  proto::VariableSpec spec = HashSpec("bias", 1, 0, 1);
  spec.mutable_shape()->RemoveLast();  // shape [0]
  ASSERT_TRUE(store.Create(HashRequest(spec)).ok());
  const std::vector<float> before = PullRowsOf(store, "bias/part_0", {3, 9}).value();
  ASSERT_EQ(before.size(), 2u);
  proto::PushRowsRequest push;
  AddRows(&push, "bias/part_0", {9}, 1, {4});
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(PullRowsOf(store, "bias/part_0", {3, 9}).value(),
            (std::vector<float>{before[0], before[1] - 2.0f}));
}

// ---------------------------------------------------------------------------
// Concurrency.

TEST(ConcurrentRowsTest, ConcurrentPushRows_OverlappingRows_EachAppliedOnceAndNeverTorn) {
  VariableStore store;
  proto::CreateVariablesRequest request;
  proto::VariableSpec dense = Spec("w", {5, 4});
  dense.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  *request.add_variables() = dense;
  proto::VariableSpec hash = HashSpec("h", 4, 0, 1);
  hash.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  *request.add_variables() = hash;
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(store.Create(request).ok());

  constexpr int kThreads = 4, kPushes = 300, kRows = 5, kHashIds = 64;
  std::atomic<bool> stop_readers{false};
  std::thread reader([&] {
    // Pulls race with pushes that create hash rows.
    std::vector<int64_t> ids;
    for (int64_t id = 0; id < kHashIds; ++id) ids.push_back(id * 1000);
    // Every push adds one constant to all 4 elements of a row, so a row
    // whose elements differ was read in the middle of a push (a torn row).
    auto expect_whole_rows = [](const std::vector<float>& v, const char* what) {
      for (size_t r = 0; r + 4 <= v.size(); r += 4) {
        ASSERT_TRUE(v[r] == v[r + 1] && v[r] == v[r + 2] && v[r] == v[r + 3])
            << what << ": torn row " << r / 4;
      }
    };
    for (int round = 0; !stop_readers.load(); ++round) {
      absl::StatusOr<std::vector<float>> h = PullRowsOf(store, "h/part_0", ids);
      ASSERT_TRUE(h.ok());
      expect_whole_rows(*h, "PullRows of h");
      absl::StatusOr<std::vector<float>> w = PullRowsOf(store, "w", {0, 1, 2, 3, 4});
      ASSERT_TRUE(w.ok());
      expect_whole_rows(*w, "PullRows of w");
      expect_whole_rows(Values(store, "w"), "Pull of w");
      if (round % 16 == 0) {
        for (const common::ShardRecord& record : store.Snapshot()) {
          expect_whole_rows(record.values, "Snapshot");
        }
      }
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < kPushes; ++i) {
        // Thread t pushes gradient t+1 to rows t%5 and (t+i)%5 (when
        // different), and to hash ids of its own and of everyone's.
        std::vector<int64_t> rows = {t % kRows};
        if ((t + i) % kRows != t % kRows) rows.push_back((t + i) % kRows);
        proto::PushRowsRequest push;
        AddRows(&push, "w", rows, 4, std::vector<float>(rows.size() * 4, t + 1.0f));
        const std::vector<int64_t> ids = {((i % kHashIds) * 1000), 1000000 + t};
        AddRows(&push, "h/part_0", ids, 4, std::vector<float>(8, t + 1.0f));
        proto::PushRowsResponse response;
        ASSERT_TRUE(store.PushRows(push, &response).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  stop_readers = true;
  reader.join();

  std::vector<double> want(kRows, 0.0);
  std::vector<double> want_hash(kHashIds, 0.0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPushes; ++i) {
      want[t % kRows] -= t + 1;
      if ((t + i) % kRows != t % kRows) want[(t + i) % kRows] -= t + 1;
      want_hash[i % kHashIds] -= t + 1;
    }
  }
  const std::vector<float> w = Values(store, "w");
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(w[r * 4 + j], want[r]) << "row " << r;
  }
  for (int64_t id = 0; id < kHashIds; ++id) {
    EXPECT_EQ(PullRowsOf(store, "h/part_0", {id * 1000}).value(),
              std::vector<float>(4, static_cast<float>(want_hash[id])))
        << "hash id " << id * 1000;
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(PullRowsOf(store, "h/part_0", {1000000 + t}).value(),
              std::vector<float>(4, -static_cast<float>(kPushes * (t + 1))));
  }
  EXPECT_EQ(store.GetStats().hash_rows, kHashIds + kThreads);
  EXPECT_EQ(store.GetStats().pushes_applied, kThreads * kPushes);
  proto::PullRowsResponse response;
  proto::PullRowsRequest pull;
  pull.add_rows()->set_name("w");
  ASSERT_TRUE(store.PullRows(pull, &response).ok());
  EXPECT_EQ(response.versions(0), kThreads * kPushes);
}

}  // namespace
}  // namespace pst::ps

namespace pst::ps {
namespace {

TEST(VariableStoreRetryTest, RetriedRowPush_IsAppliedOnce) {
  VariableStore store;
  proto::CreateVariablesRequest create;
  proto::VariableSpec* spec = create.add_variables();
  spec->set_name("t");
  spec->set_dtype(proto::DT_FLOAT32);
  spec->add_shape(4);
  spec->add_shape(2);
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(store.Create(create).ok());
  proto::PushRowsRequest push;
  push.set_worker_index(1);
  push.set_incarnation(5);
  push.set_step(0);
  proto::RowIds* ids = push.add_rows();
  ids->set_name("t");
  ids->add_ids(2);
  const std::vector<float> grad = {1.0f, 2.0f};
  const std::vector<int64_t> dims = {1, 2};
  common::PackFloats(grad, common::Shape(dims.begin(), dims.end()), push.add_gradients());
  for (int attempt = 0; attempt < 2; ++attempt) {
    proto::PushRowsResponse response;
    ASSERT_TRUE(store.PushRows(push, &response).ok());
  }
  proto::PullResponse values;
  ASSERT_TRUE(store.Pull({}, &values).ok());
  std::vector<float> t(8);
  common::UnpackFloats(values.values(0), t);
  EXPECT_EQ(t[4], -1.0f) << "applied once, not twice";
  EXPECT_EQ(t[5], -2.0f);
  EXPECT_EQ(values.versions(0), 1);
  EXPECT_EQ(store.GetStats().duplicates_ignored, 1);
  push.set_step(1);
  proto::PushRowsResponse response;
  ASSERT_TRUE(store.PushRows(push, &response).ok());
  EXPECT_EQ(response.versions(0), 2);
}

}  // namespace
}  // namespace pst::ps

namespace pst::ps {
namespace {

std::vector<const common::ShardRecord*> Pointers(const std::vector<common::ShardRecord>& records) {
  std::vector<const common::ShardRecord*> out;
  for (const common::ShardRecord& r : records) out.push_back(&r);
  return out;
}

TEST_F(VariableStoreTest, Restore_NewGeneration_RefusesPushesOfTheOldOne) {
  const std::vector<common::ShardRecord> checkpoint = store_.Snapshot();
  const std::vector<float> saved_w = Values(store_, "w");
  proto::PushRequest push;
  AddGradient(&push, "w", {2, 3}, {1, 1, 1, 1, 1, 1});
  proto::PushResponse response;
  ASSERT_TRUE(store_.Push(push, &response).ok());  // generation 0, like the store
  ASSERT_NE(Values(store_, "w"), saved_w);

  ASSERT_TRUE(store_.Restore(Pointers(checkpoint), /*generation=*/1).ok());
  EXPECT_EQ(store_.generation(), 1);
  EXPECT_EQ(store_.GetStats().generation, 1);
  EXPECT_EQ(Values(store_, "w"), saved_w);
  // A gradient computed before the restore is refused, dense or by rows.
  absl::Status old = store_.Push(push, &response);
  EXPECT_EQ(old.code(), absl::StatusCode::kAborted) << old;
  EXPECT_NE(old.message().find("generation"), std::string::npos) << old;
  proto::PushRowsRequest rows;
  rows.add_rows()->set_name("w");
  rows.mutable_rows(0)->add_ids(1);
  const std::vector<int64_t> dims = {1, 3};
  const std::vector<float> ones = {1, 1, 1};
  common::PackFloats(ones, common::Shape(dims.begin(), dims.end()), rows.add_gradients());
  proto::PushRowsResponse rows_response;
  EXPECT_EQ(store_.PushRows(rows, &rows_response).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Values(store_, "w"), saved_w) << "nothing applied";
  // One of the new generation is applied.
  push.set_generation(1);
  ASSERT_TRUE(store_.Push(push, &response).ok());
  EXPECT_NE(Values(store_, "w"), saved_w);
}

TEST_F(VariableStoreTest, Push_RecordsTheWorkersDataPosition_RestoreForgetsIt) {
  const std::vector<common::ShardRecord> checkpoint = store_.Snapshot();
  proto::PushRequest push;
  push.set_worker_index(1);
  push.set_incarnation(7);
  AddGradient(&push, "b", {3}, {1, 1, 1});
  proto::PushResponse response;
  push.set_step(0);
  push.set_position(41);
  ASSERT_TRUE(store_.Push(push, &response).ok());
  push.set_step(1);
  push.set_position(42);
  ASSERT_TRUE(store_.Push(push, &response).ok());
  push.set_position(40);  // a retry of an older batch does not move it back
  push.set_step(2);
  ASSERT_TRUE(store_.Push(push, &response).ok());
  EXPECT_EQ(store_.GetStats().worker_positions.at(1), 43);
  EXPECT_EQ(store_.GetStats().worker_positions.count(0), 0u);
  push.set_worker_index(0);
  push.set_position(-1);  // none
  ASSERT_TRUE(store_.Push(push, &response).ok());
  EXPECT_EQ(store_.GetStats().worker_positions.count(0), 0u);
  ASSERT_TRUE(store_.Restore(Pointers(checkpoint), 1).ok());
  EXPECT_TRUE(store_.GetStats().worker_positions.empty());
}

TEST(VariableStoreRestoreTest, Restore_AnswersParkedPullsAborted) {
  VariableStore store;
  proto::CreateVariablesRequest create = CreateRequest();
  create.mutable_sync()->set_mode(proto::SYNC);
  create.mutable_sync()->set_num_workers(2);
  ASSERT_TRUE(store.Create(create).ok());
  const std::vector<common::ShardRecord> checkpoint = store.Snapshot();
  proto::PullRequest pull;
  pull.set_worker_index(0);
  pull.set_min_version(1);  // not reached: both workers must push first
  proto::PullResponse response;
  absl::Notification done;
  absl::Status result;
  const uint64_t ticket = store.PullWhenReady(&pull, &response, [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  ASSERT_NE(ticket, 0u) << "the pull should have parked";
  EXPECT_FALSE(done.HasBeenNotified());
  ASSERT_TRUE(store.Restore(Pointers(checkpoint), /*generation=*/1).ok());
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(result.code(), absl::StatusCode::kAborted) << result;
  EXPECT_FALSE(store.CancelWaiter(ticket));
}

// ---------------------------------------------------------------------------
// Hard limits (issue 19): each refused with a status naming it, changing
// nothing.

TEST(VariableStoreLimitsTest, Pull_RepeatedNameOrTooLargeAnAnswer_IsRefused) {
  VariableStore::Options options;
  options.max_response_bytes = 12 * sizeof(float);
  VariableStore store(options);
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("w", {3, 4});
  *create.add_variables() = Spec("b", {4});
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE(store.Create(create).ok());
  google::protobuf::RepeatedPtrField<std::string> names;
  for (int i = 0; i < 100000; ++i) *names.Add() = "b";
  proto::PullResponse response;
  absl::Status status = store.Pull(names, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("more than once"), std::string::npos) << status;
  EXPECT_EQ(response.values_size(), 0);
  names.Clear();
  *names.Add() = "w";
  EXPECT_TRUE(store.Pull(names, &response).ok());
  *names.Add() = "b";  // 16 floats: past the 12 allowed
  status = store.Pull(names, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("message limit"), std::string::npos) << status;
}

TEST(VariableStoreLimitsTest, Create_PastTheByteBudget_IsRefusedBeforeAllocating) {
  VariableStore::Options options;
  options.max_store_bytes = int64_t{1} << 20;  // 1 MiB
  VariableStore store(options);
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("small", {1024, 64});  // 256 KiB, slots none (sgd)
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE(store.Create(create).ok());
  // [2^32] (16 GiB), then 1000 of [2^30]: refused whole, nothing allocated.
  proto::CreateVariablesRequest huge;
  huge.mutable_optimizer()->set_name("sgd");
  huge.mutable_optimizer()->set_learning_rate(0.1f);
  proto::VariableSpec big = Spec("big", {int64_t{1} << 32});
  big.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  *huge.add_variables() = big;
  absl::StatusOr<int> created = store.Create(huge);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted) << created.status();
  EXPECT_NE(created.status().message().find("--max_variable_bytes"), std::string::npos);
  proto::CreateVariablesRequest many;
  many.mutable_optimizer()->set_name("sgd");
  many.mutable_optimizer()->set_learning_rate(0.1f);
  for (int i = 0; i < 1000; ++i) {
    proto::VariableSpec spec = Spec(absl::StrCat("v", i), {int64_t{1} << 30});
    spec.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    *many.add_variables() = spec;
  }
  created = store.Create(many);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted) << created.status();
  EXPECT_EQ(store.GetStats().num_variables, 1);
  // Adam keeps two slots: the budget counts them.
  VariableStore adam_store(options);
  proto::CreateVariablesRequest adam;
  *adam.add_variables() = Spec("w", {1024, 128});  // 512 KiB of values, 1.5 MiB with slots
  adam.mutable_optimizer()->set_name("adam");
  adam.mutable_optimizer()->set_learning_rate(0.1f);
  adam.mutable_optimizer()->set_beta1(0.9f);
  adam.mutable_optimizer()->set_beta2(0.999f);
  adam.mutable_optimizer()->set_epsilon(1e-8f);
  EXPECT_EQ(adam_store.Create(adam).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(VariableStoreLimitsTest, HashTable_PastItsRowLimit_RefusesThePushWhole) {
  VariableStore::Options options;
  options.max_hash_rows = 3;
  VariableStore store(options);
  ASSERT_TRUE(store.Create(HashRequest(HashSpec("h", 2, 0, 1))).ok());
  ASSERT_TRUE(MakeHashRows(store, "h/part_0", {1, 2}, 2).ok());
  // Reads of unseen ids store nothing, however many.
  std::vector<int64_t> fresh(1000);
  for (int i = 0; i < 1000; ++i) fresh[i] = 1000 + i;
  ASSERT_TRUE(PullRowsOf(store, "h/part_0", fresh).ok());
  EXPECT_EQ(store.GetStats().hash_rows, 2);
  const std::vector<float> before = PullRowsOf(store, "h/part_0", {1, 2}).value();
  proto::PushRowsRequest push;
  AddRows(&push, "h/part_0", {1, 3, 4}, 2, std::vector<float>(6, 1.0f));  // two new rows
  proto::PushRowsResponse response;
  absl::Status status = store.PushRows(push, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("--max_table_rows"), std::string::npos) << status;
  EXPECT_EQ(store.GetStats().hash_rows, 2);
  EXPECT_EQ(PullRowsOf(store, "h/part_0", {1, 2}).value(), before) << "nothing applied";
  // One new row still fits.
  EXPECT_TRUE(MakeHashRows(store, "h/part_0", {1, 3}, 2).ok());
  EXPECT_EQ(store.GetStats().hash_rows, 3);
}

TEST(VariableStoreLimitsTest, WorkerIndexAndCountersOutOfRange_AreInvalidArgument) {
  VariableStore store;
  proto::CreateVariablesRequest create = CreateRequest();
  create.mutable_sync()->set_mode(proto::SSP);
  create.mutable_sync()->set_num_workers(2);
  create.mutable_sync()->set_staleness(1);
  ASSERT_TRUE(store.Create(create).ok());
  const std::vector<common::ShardRecord> before = store.Snapshot();
  auto push_with = [&](int32_t worker, int64_t step) {
    proto::PushRequest push;
    push.set_worker_index(worker);
    push.set_step(step);
    AddGradient(&push, "b", {3}, {1, 1, 1});
    proto::PushResponse response;
    return store.Push(push, &response);
  };
  for (int32_t worker : {-1, 2, std::numeric_limits<int32_t>::max(),
                         std::numeric_limits<int32_t>::min()}) {
    absl::Status status = push_with(worker, 0);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << worker << ": " << status;
  }
  for (int64_t step : {int64_t{-1}, std::numeric_limits<int64_t>::max(),
                       std::numeric_limits<int64_t>::min()}) {
    absl::Status status = push_with(0, step);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << step << ": " << status;
  }
  // A data position past the counters' range (the fuzzer's INT64_MAX, once
  // an overflow at position + 1); -1 says "none" and is fine.
  for (int64_t position : {std::numeric_limits<int64_t>::max(), int64_t{1} << 62}) {
    proto::PushRequest push;
    push.set_worker_index(0);
    push.set_position(position);
    AddGradient(&push, "b", {3}, {1, 1, 1});
    proto::PushResponse response;
    absl::Status status = store.Push(push, &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << position << ": " << status;
    EXPECT_NE(status.message().find("position"), std::string::npos) << status;
  }
  proto::PushRowsRequest rows;
  rows.set_worker_index(7);
  AddRows(&rows, "b", {0}, 1, {1});
  proto::PushRowsResponse rows_response;
  EXPECT_EQ(store.PushRows(rows, &rows_response).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.GetStats().pushes_applied, 0);

  auto pull_with = [&](int32_t worker, int64_t clock, int64_t min_version) {
    proto::PullRequest pull;
    pull.set_worker_index(worker);
    pull.set_clock(clock);
    pull.set_min_version(min_version);
    proto::PullResponse response;
    absl::Status result;
    const uint64_t ticket =
        store.PullWhenReady(&pull, &response, [&](absl::Status s) { result = std::move(s); });
    EXPECT_EQ(ticket, 0u) << "parked";
    return result;
  };
  EXPECT_EQ(pull_with(0, std::numeric_limits<int64_t>::max(), 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pull_with(0, std::numeric_limits<int64_t>::min(), 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pull_with(0, 0, std::numeric_limits<int64_t>::min()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pull_with(5, 0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pull_with(-1, 0, 0).ok()) << "-1: not a worker (the chief's evaluation)";
  EXPECT_TRUE(pull_with(1, 0, 0).ok());
  EXPECT_EQ(store.GetStats().parked_pulls, 0);
  const std::vector<common::ShardRecord> after = store.Snapshot();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].values, before[i].values);
}

TEST(VariableStoreLimitsTest, ParkedPulls_AreCappedAndExpire) {
  VariableStore::Options options;
  options.max_parked_pulls = 2;
  VariableStore store(options);
  proto::CreateVariablesRequest create = CreateRequest();
  create.mutable_sync()->set_mode(proto::SYNC);
  create.mutable_sync()->set_num_workers(2);
  ASSERT_TRUE(store.Create(create).ok());
  proto::PullRequest pull;
  pull.set_worker_index(0);
  pull.set_min_version(1);  // not reached: both workers must push first
  std::vector<proto::PullResponse> responses(3);
  std::vector<absl::Status> results(3, absl::UnknownError("not answered"));
  std::vector<uint64_t> tickets(3);
  for (int i = 0; i < 3; ++i) {
    tickets[i] = store.PullWhenReady(&pull, &responses[i],
                                     [&results, i](absl::Status s) { results[i] = std::move(s); });
  }
  EXPECT_NE(tickets[0], 0u);
  EXPECT_NE(tickets[1], 0u);
  EXPECT_EQ(tickets[2], 0u) << "the third should have been refused at once";
  EXPECT_EQ(results[2].code(), absl::StatusCode::kResourceExhausted) << results[2];
  EXPECT_NE(results[2].message().find("--max_parked_pulls"), std::string::npos);
  EXPECT_EQ(results[0].code(), absl::StatusCode::kUnknown) << "still parked";
  EXPECT_EQ(store.ExpireParked(absl::Hours(1)), 0);
  EXPECT_EQ(store.ExpireParked(absl::ZeroDuration()), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kDeadlineExceeded) << results[i];
    EXPECT_FALSE(store.CancelWaiter(tickets[i]));
  }
}

// ---------------------------------------------------------------------------
// Snapshot cuts (consistent checkpoints).

TEST(VariableStoreCutTest, Snapshot_SaysWhichPushesOfEachWorkerItHolds) {
  VariableStore store;
  proto::CreateVariablesRequest create = CreateRequest();
  create.mutable_sync()->set_num_workers(2);
  ASSERT_TRUE(store.Create(create).ok());
  VariableStore::Cut cut;
  store.Snapshot(nullptr, &cut);
  EXPECT_TRUE(cut.workers.empty());
  EXPECT_TRUE(cut.holds_dense);
  EXPECT_FALSE(cut.sync_pending);
  auto push = [&](int32_t worker, int32_t part, int64_t step, const std::string& name,
                  std::vector<int64_t> shape) {
    proto::PushRequest request;
    request.set_worker_index(worker);
    request.set_incarnation(100 + worker);
    request.set_step(step);
    request.set_part(part);
    request.set_position(step);  // one batch a step
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    AddGradient(&request, name, shape, std::vector<float>(n, 0.5f));
    proto::PushResponse response;
    return store.Push(request, &response);
  };
  // Worker 0's step 4 in two parts, both here; worker 1's step 2, part 0 only.
  ASSERT_TRUE(push(0, 0, 4, "w", {2, 3}).ok());
  ASSERT_TRUE(push(0, 1, 4, "b", {3}).ok());
  ASSERT_TRUE(push(1, 0, 1, "w", {2, 3}).ok());
  ASSERT_TRUE(push(1, 1, 1, "b", {3}).ok());
  ASSERT_TRUE(push(1, 0, 2, "w", {2, 3}).ok());
  absl::Duration held;
  const std::vector<common::ShardRecord> records = store.Snapshot(&held, &cut);
  ASSERT_EQ(cut.workers.size(), 2u);
  EXPECT_EQ(cut.workers[0].worker_index(), 0);
  EXPECT_EQ(cut.workers[0].position(), 5);
  EXPECT_EQ(cut.workers[0].min_step(), 4);
  EXPECT_EQ(cut.workers[0].max_step(), 4);
  EXPECT_EQ(cut.workers[1].position(), 3);
  EXPECT_EQ(cut.workers[1].min_step(), 1) << "part 1 of step 2 not held";
  EXPECT_EQ(cut.workers[1].max_step(), 2);
  EXPECT_EQ(cut.max_version, 3) << "w took three pushes";
  EXPECT_GE(held, absl::ZeroDuration());
  // The records are the state the cut describes.
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].spec.name(), "w");
  EXPECT_EQ(records[1].version, 3);
}

TEST(VariableStoreCutTest, Snapshot_InSync_SaysWhenGradientsWaitForTheQuorum) {
  VariableStore store;
  proto::CreateVariablesRequest create = CreateRequest();
  create.mutable_sync()->set_mode(proto::SYNC);
  create.mutable_sync()->set_num_workers(2);
  ASSERT_TRUE(store.Create(create).ok());
  proto::PushRequest request;
  request.set_worker_index(0);
  request.set_step(0);
  AddGradient(&request, "b", {3}, {1, 1, 1});
  proto::PushResponse response;
  ASSERT_TRUE(store.Push(request, &response).ok());
  VariableStore::Cut cut;
  store.Snapshot(nullptr, &cut);
  EXPECT_TRUE(cut.sync_pending) << "worker 0's gradient waits for worker 1's";
  request.set_worker_index(1);
  ASSERT_TRUE(store.Push(request, &response).ok());
  store.Snapshot(nullptr, &cut);
  EXPECT_FALSE(cut.sync_pending);
}

}  // namespace
}  // namespace pst::ps
