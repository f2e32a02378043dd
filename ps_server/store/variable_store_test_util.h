// Helpers of the VariableStore tests (variable_store_test.cc,
// variable_store_rows_test.cc, variable_store_limits_test.cc): variable
// specs and requests, reading values back, and the two fixtures.
#ifndef PST_PS_SERVER_STORE_VARIABLE_STORE_TEST_UTIL_H_
#define PST_PS_SERVER_STORE_VARIABLE_STORE_TEST_UTIL_H_

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
#include "ps_server/store/variable_store.h"

namespace pst::ps {

inline proto::VariableSpec Spec(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(1.0f);
  spec.mutable_initializer()->set_seed(3);
  return spec;
}

inline proto::CreateVariablesRequest CreateRequest(float lr = 0.5f) {
  proto::CreateVariablesRequest request;
  *request.add_variables() = Spec("w", {2, 3});
  *request.add_variables() = Spec("b", {3});
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(lr);
  return request;
}

inline void AddGradient(proto::PushRequest* push, const std::string& name,
                        std::vector<int64_t> shape, std::vector<float> values) {
  push->add_names(name);
  common::PackFloats(values, common::Shape(shape.begin(), shape.end()), push->add_gradients());
}

inline std::vector<float> Values(const VariableStore& store, const std::string& name) {
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

inline std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

inline proto::Initializer Uniform(uint64_t seed) {
  proto::Initializer init;
  init.set_kind(proto::Initializer::UNIFORM);
  init.set_scale(1.0f);
  init.set_seed(seed);
  return init;
}

// Partition p of P of `full` ([N, dims...]) under MOD or DIV routing, with
// TensorFlow's layout, written here independently of common/partition.
inline proto::VariableSpec PartSpec(const proto::VariableSpec& full, int p, int num,
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

inline proto::VariableSpec HashSpec(const std::string& variable, int64_t dim, int p, int num,
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

inline void AddRows(proto::PushRowsRequest* push, const std::string& name, std::vector<int64_t> ids,
                    int64_t dim, std::vector<float> grads) {
  proto::RowIds* rows = push->add_rows();
  rows->set_name(name);
  for (int64_t id : ids) rows->add_ids(id);
  common::Shape shape;
  shape.Add(static_cast<int64_t>(ids.size()));
  shape.Add(dim);
  common::PackFloats(grads, shape, push->add_gradients());
}

inline absl::StatusOr<std::vector<float>> PullRowsOf(const VariableStore& store,
                                                     const std::string& name,
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
inline absl::Status MakeHashRows(VariableStore& store, const std::string& name,
                                 std::vector<int64_t> ids, int64_t dim) {
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
inline Snapshot Snap(const VariableStore& store) {
  Snapshot snap;
  EXPECT_TRUE(store.Pull({}, &snap.pulled).ok());
  snap.pushes_applied = store.GetStats().pushes_applied;
  snap.hash_rows = store.GetStats().hash_rows;
  return snap;
}

// A store with a whole variable "w" [6, 2], a rank-1 "b" [4], partitions 0
// and 1 of "emb" [7, 3] under MOD, partition 1 of "div" [7, 3] under DIV
// (ids [3, 5)), and partition 1 of 2 of the hash embedding "h" (dim 2).
inline proto::CreateVariablesRequest RowRequest(bool skip_nonfinite = false) {
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

inline proto::CreateVariablesRequest HashRequest(proto::VariableSpec spec) {
  proto::CreateVariablesRequest request;
  *request.add_variables() = std::move(spec);
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(0.5f);
  return request;
}

inline std::vector<const common::ShardRecord*> Pointers(
    const std::vector<common::ShardRecord>& records) {
  std::vector<const common::ShardRecord*> out;
  for (const common::ShardRecord& r : records) out.push_back(&r);
  return out;
}

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_VARIABLE_STORE_TEST_UTIL_H_
