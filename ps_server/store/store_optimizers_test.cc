// Variables of one store with optimizers of their own (their groups', in
// VariableSpec.optimizer): each push takes its own variable's rule, and a
// restore refuses a variable saved with another optimizer, naming it,
// unless its slots are reset.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/tensor_util.h"
#include "ps_server/store/optimizer.h"
#include "ps_server/store/store_restorer.h"
#include "ps_server/store/store_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using testing_util::Dense;

proto::OptimizerConfig Named(const std::string& name, float lr) {
  proto::OptimizerConfig c;
  c.set_name(name);
  c.set_learning_rate(lr);
  c.set_beta1(0.9f);
  c.set_beta2(0.999f);
  return c;
}

// "w" [2, 2] and "e" [3, 2]; e trains with `e_optimizer` when it has a
// name, w always with the request's (the job's) adam.
proto::CreateVariablesRequest Create(const proto::OptimizerConfig& e_optimizer) {
  proto::CreateVariablesRequest create;
  *create.mutable_optimizer() = Named("adam", 0.01f);
  *create.add_variables() = Dense("w", {2, 2});
  proto::VariableSpec e = Dense("e", {3, 2});
  if (!e_optimizer.name().empty()) *e.mutable_optimizer() = e_optimizer;
  *create.add_variables() = e;
  return create;
}

std::vector<float> Values(const VariableStore& store, const std::string& name) {
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add(std::string(name));
  proto::PullResponse pulled;
  EXPECT_TRUE(store.Pull(names, &pulled).ok());
  std::vector<float> v(pulled.values(0).data().size() / sizeof(float));
  common::UnpackFloats(pulled.values(0), v);
  return v;
}

void PushOnes(VariableStore& store, int64_t step) {
  proto::PushRequest push;
  push.set_worker_index(0);
  push.set_step(step);
  push.set_generation(store.generation());
  for (const auto& [name, n] : {std::pair<std::string, int>{"w", 2}, {"e", 3}}) {
    push.add_names(name);
    const std::vector<float> g(n * 2, 0.5f);
    const std::vector<int64_t> shape = {n, 2};
    common::PackFloats(g, common::Shape(shape.begin(), shape.end()), push.add_gradients());
  }
  proto::PushResponse response;
  ASSERT_TRUE(store.Push(push, &response).ok());
}

// The values after one push of 0.5s, by `config` alone.
std::vector<float> Expected(const proto::OptimizerConfig& config, std::vector<float> param) {
  auto opt = CreateOptimizer(config);
  EXPECT_TRUE(opt.ok()) << opt.status();
  std::vector<std::vector<float>> slots;
  for (int s = 0; s < (*opt)->num_slots(); ++s) {
    slots.emplace_back(param.size(), (*opt)->SlotInitialValue(s));
  }
  std::vector<std::span<float>> views(slots.begin(), slots.end());
  (*opt)->Apply(param, std::vector<float>(param.size(), 0.5f), views, (*opt)->StepAt(1));
  return param;
}

const common::ShardRecord& RecordOf(const std::vector<common::ShardRecord>& records,
                                    const std::string& name) {
  for (const auto& r : records) {
    if (r.spec.name() == name) return r;
  }
  ADD_FAILURE() << "no record " << name;
  return records.front();
}

TEST(StoreOptimizersTest, EachVariable_TrainsWithItsOwnOptimizer) {
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(Named("adagrad", 0.1f))).ok());
  const std::vector<float> w0 = Values(store, "w"), e0 = Values(store, "e");
  PushOnes(store, 0);
  EXPECT_EQ(Values(store, "w"), Expected(Named("adam", 0.01f), w0));
  EXPECT_EQ(Values(store, "e"), Expected(Named("adagrad", 0.1f), e0));
  const std::vector<common::ShardRecord> records = store.Snapshot();
  EXPECT_EQ(RecordOf(records, "w").slots.size(), 2u);  // m, v
  EXPECT_EQ(RecordOf(records, "e").slots.size(), 1u);  // accum
  EXPECT_EQ(RecordOf(records, "e").spec.optimizer().name(), "adagrad");
}

TEST(StoreOptimizersTest, BadOptimizerOfAVariable_IsRefusedNamingIt) {
  VariableStore store;
  const absl::StatusOr<int> created = store.Create(Create(Named("lamb", 0.1f)));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(created.status().message(), "variable 'e': unknown optimizer"))
      << created.status();
}

std::vector<const common::ShardRecord*> Pointers(const std::vector<common::ShardRecord>& records) {
  std::vector<const common::ShardRecord*> out;
  for (const auto& r : records) out.push_back(&r);
  return out;
}

TEST(StoreOptimizersTest, RestoreWithAnotherOptimizer_IsRefusedUnlessTheSlotsAreReset) {
  VariableStore saved;
  ASSERT_TRUE(saved.Create(Create(Named("adam", 0.01f))).ok());
  PushOnes(saved, 0);
  const std::vector<common::ShardRecord> records = saved.Snapshot();

  // "e" now trains with adadelta: 2 slots, as adam's, but not adam's.
  VariableStore store;
  ASSERT_TRUE(store.Create(Create(Named("adadelta", 1.0f))).ok());
  const std::vector<float> before = Values(store, "e");
  const absl::Status refused = store.Restore(Pointers(records), 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "variable 'e' was saved with adam (tensorflow form; slots m, v) "
                                "but trains with adadelta (tensorflow form; slots accum, "
                                "accum_update) here"))
      << refused;
  EXPECT_EQ(Values(store, "e"), before);  // nothing changed

  // Reset: the values and version come back, the slots start afresh.
  std::unique_ptr<StoreRestorer> restorer = store.BeginRestore(/*reset_slots=*/true);
  for (const common::ShardRecord& r : records) ASSERT_TRUE(restorer->Absorb(r).ok());
  ASSERT_TRUE(restorer->Commit(1).ok());
  EXPECT_EQ(Values(store, "e"), RecordOf(records, "e").values);
  EXPECT_EQ(Values(store, "w"), RecordOf(records, "w").values);
  const std::vector<common::ShardRecord> after = store.Snapshot();
  const common::ShardRecord& e = RecordOf(after, "e");
  EXPECT_EQ(e.version, 1);
  ASSERT_EQ(e.slots.size(), 2u);
  for (const auto& slot : e.slots) EXPECT_EQ(slot, std::vector<float>(6, 0.0f));
  // "w" kept its optimizer: its slots came back as they were.
  EXPECT_EQ(RecordOf(after, "w").slots, RecordOf(records, "w").slots);

  // A fresh adagrad accumulator starts at its initial value, not 0.
  VariableStore adagrad;
  ASSERT_TRUE(adagrad.Create(Create(Named("adagrad", 0.1f))).ok());
  std::unique_ptr<StoreRestorer> reset = adagrad.BeginRestore(/*reset_slots=*/true);
  for (const common::ShardRecord& r : records) ASSERT_TRUE(reset->Absorb(r).ok());
  ASSERT_TRUE(reset->Commit(1).ok());
  EXPECT_EQ(RecordOf(adagrad.Snapshot(), "e").slots,
            std::vector<std::vector<float>>(1, std::vector<float>(6, 0.1f)));
}

}  // namespace
}  // namespace pst::ps
