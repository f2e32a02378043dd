// Test helpers for a store's requests, shared by the store's tests and the
// replication tests (node/replication_test_util.h): variable specs, the
// optimizer every replicated shard uses, and random pushes.
#ifndef PST_PS_SERVER_STORE_STORE_TEST_UTIL_H_
#define PST_PS_SERVER_STORE_STORE_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/tensor_util.h"
#include "proto/pstrain.pb.h"

namespace pst::ps::testing_util {

inline proto::VariableSpec Dense(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec.mutable_initializer()->set_scale(0.5f);
  spec.mutable_initializer()->set_seed(7);
  return spec;
}

inline proto::VariableSpec Hash(const std::string& name, int64_t dim, int admit_after) {
  proto::VariableSpec spec = Dense(name + "/part_0", {0, dim});
  spec.set_variable(name);
  spec.set_partition(0);
  spec.set_num_partitions(1);
  spec.set_routing(proto::HASH);
  spec.set_admit_after(admit_after);
  return spec;
}

// Adam, as every replication test's shards use it.
inline proto::OptimizerConfig Adam() {
  proto::OptimizerConfig adam;
  adam.set_name("adam");
  adam.set_learning_rate(0.01f);
  adam.set_beta1(0.9f);
  adam.set_beta2(0.999f);
  adam.set_epsilon(1e-7f);
  return adam;
}

// Adds a gradient of `shape` for `name` to `push`, drawn in [-1, 1).
inline void AddGradient(proto::PushRequest* push, const std::string& name,
                        const std::vector<int64_t>& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> g(static_cast<size_t>(n));
  for (float& x : g) x = u(rng);
  push->add_names(name);
  common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push->add_gradients());
}

// A push of worker `worker` (incarnation 100 + worker) at `step`, with a
// random gradient of `shape` for `name`.
inline proto::PushRequest PushOf(const std::string& name, const std::vector<int64_t>& shape,
                                 int worker, int64_t step, std::mt19937& rng) {
  proto::PushRequest push;
  push.set_worker_index(worker);
  push.set_incarnation(100 + worker);
  push.set_step(step);
  push.set_position(step);
  AddGradient(&push, name, shape, rng);
  return push;
}

// A push of dense "w" [16, 8] and "b" [8].
inline proto::PushRequest DensePush(int worker, int64_t step, std::mt19937& rng) {
  proto::PushRequest push = PushOf("w", {16, 8}, worker, step, rng);
  AddGradient(&push, "b", {8}, rng);
  return push;
}

inline proto::PushRowsRequest RowPush(int worker, int64_t step, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> id(0, 40);
  std::uniform_real_distribution<float> u(-1, 1);
  proto::PushRowsRequest push;
  push.set_worker_index(worker);
  push.set_incarnation(100 + worker);
  push.set_step(step);
  proto::RowIds* rows = push.add_rows();
  rows->set_name("emb/part_0");
  while (rows->ids_size() < 6) {
    const int64_t x = id(rng);
    bool seen = false;
    for (int64_t y : rows->ids()) seen |= y == x;
    if (!seen) rows->add_ids(x);
  }
  std::vector<float> g(6 * 4);
  for (float& x : g) x = u(rng);
  const std::vector<int64_t> shape = {6, 4};
  common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push.add_gradients());
  return push;
}

}  // namespace pst::ps::testing_util

#endif  // PST_PS_SERVER_STORE_STORE_TEST_UTIL_H_
