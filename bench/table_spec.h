// The hash table the benchmarks' stores hold: the one partition of "emb",
// rows of `dim` floats made on an id's first push, started uniform in
// [-0.5, 0.5) or (`init`) otherwise.
//
// Thread-safety: a pure function.
#ifndef PST_BENCH_TABLE_SPEC_H_
#define PST_BENCH_TABLE_SPEC_H_

#include <cstdint>

#include "proto/pstrain.pb.h"

namespace pst::bench {

inline constexpr char kTablePartition[] = "emb/part_0";

inline proto::VariableSpec HashTableSpec(
    int64_t dim, proto::Initializer::Kind init = proto::Initializer::UNIFORM) {
  proto::VariableSpec spec;
  spec.set_name(kTablePartition);
  spec.set_variable("emb");
  spec.set_dtype(proto::DT_FLOAT32);
  spec.add_shape(0);
  spec.add_shape(dim);
  spec.mutable_initializer()->set_kind(init);
  if (init == proto::Initializer::UNIFORM) spec.mutable_initializer()->set_scale(0.5f);
  spec.set_routing(proto::HASH);
  spec.set_partition(0);
  spec.set_num_partitions(1);
  spec.set_admit_after(1);
  return spec;
}

}  // namespace pst::bench

#endif  // PST_BENCH_TABLE_SPEC_H_
