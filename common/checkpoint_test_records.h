// Shard records and checks shared by the checkpoint tests of common/: a
// sample of every kind of record a ps writes.
#ifndef PST_COMMON_CHECKPOINT_TEST_RECORDS_H_
#define PST_COMMON_CHECKPOINT_TEST_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint_format.h"
#include "gtest/gtest.h"

namespace pst::common {

// Whether `text` contains `part`, showing both when not.
inline ::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

inline proto::VariableSpec DenseSpec(const std::string& name, std::vector<int64_t> shape) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::GLOROT_UNIFORM);
  spec.mutable_initializer()->set_seed(42);
  return spec;
}

inline std::vector<float> Ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.5f * static_cast<float>(i);
  return v;
}

// Four records: dense rank 2 with two slots, rank 1 with no slot, a hash
// embedding with ids, and a MOD partition.
inline std::vector<ShardRecord> SampleRecords() {
  std::vector<ShardRecord> records;
  {
    ShardRecord r;
    r.spec = DenseSpec("dense_0/kernel", {3, 4});
    r.version = 17;
    r.rows = 3;
    r.values = Ramp(12, 1.0f);
    r.slots = {Ramp(12, -3.0f), Ramp(12, 100.0f)};
    records.push_back(r);
  }
  {
    ShardRecord r;
    r.spec = DenseSpec("dense_0/bias", {5});
    r.version = 17;
    r.rows = 5;
    r.values = Ramp(5, 0.25f);
    records.push_back(r);
  }
  {
    ShardRecord r;
    r.spec = DenseSpec("emb/part_0", {0, 3});
    r.spec.set_variable("emb");
    r.spec.set_routing(proto::HASH);
    r.spec.set_partition(0);
    r.spec.set_num_partitions(2);
    r.spec.set_admit_after(2);
    r.version = 9;
    r.rows = 4;
    r.values = Ramp(12, 7.0f);
    r.slots = {Ramp(12, 0.1f)};
    r.hash_ids = {-5, 12, 1LL << 40, 3};
    records.push_back(r);
  }
  {
    ShardRecord r;
    r.spec = DenseSpec("table/part_1", {2, 2});
    r.spec.set_variable("table");
    r.spec.add_full_shape(5);
    r.spec.add_full_shape(2);
    r.spec.set_partition(1);
    r.spec.set_num_partitions(3);
    r.spec.set_routing(proto::MOD);
    r.spec.set_row_offset(1);
    r.spec.set_row_stride(3);
    r.version = 2;
    r.rows = 2;
    r.values = Ramp(4, -1.0f);
    r.slots = {Ramp(4, 2.0f)};
    records.push_back(r);
  }
  return records;
}

}  // namespace pst::common

#endif  // PST_COMMON_CHECKPOINT_TEST_RECORDS_H_
