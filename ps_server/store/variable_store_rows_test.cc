// VariableStore (variable_store.h), rows: PullRows and PushRows, partitions,
// hash embeddings and admission, concurrent row pushes, retries.
#include <gtest/gtest.h>

#include "ps_server/store/variable_store.h"
#include "ps_server/store/variable_store_test_util.h"

namespace pst::ps {
namespace {

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
