// VariableStore (variable_store.h), dense variables: create, push, pull,
// initial values, concurrency; restores and generations; snapshot cuts.
// Rows and hash tables: variable_store_rows_test.cc; limits:
// variable_store_limits_test.cc.
#include "ps_server/store/variable_store.h"

#include <gtest/gtest.h>

#include "ps_server/store/variable_store_test_util.h"

namespace pst::ps {
namespace {

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
      store.PushPullWhenReady(
          &request, &answer, [&](absl::Status s) { status = s; }, &payloads);
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
