// VariableStore (variable_store.h), its hard limits (each refused with a
// status naming it, changing nothing) and its statistics.
#include <gtest/gtest.h>

#include "ps_server/store/variable_store.h"
#include "ps_server/store/variable_store_test_util.h"

namespace pst::ps {
namespace {

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
  for (int32_t worker :
       {-1, 2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    absl::Status status = push_with(worker, 0);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << worker << ": " << status;
  }
  for (int64_t step :
       {int64_t{-1}, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
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

}  // namespace
}  // namespace pst::ps
