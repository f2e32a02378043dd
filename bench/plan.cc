#include "bench/plan.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "common/placement.h"
#include "common/status_macros.h"

namespace pst::bench {
namespace {

// The dense variables as the chief places a model's: each cut into pieces
// of at most --dense_piece_bytes (common::SplitDense) and placed
// size-balanced. With --dense_piece_bytes=0, each is split into one part
// per ps instead, so that every ps still serves its share.
absl::StatusOr<std::vector<proto::PlacementPlan::Entry>> DenseEntries(const Options& options,
                                                                      int num_ps) {
  std::vector<proto::VariableSpec> specs;
  for (int64_t size : options.sizes) {
    proto::VariableSpec spec;
    spec.set_name(DenseName(size));
    spec.set_dtype(proto::DT_FLOAT32);
    spec.add_shape(size);
    spec.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    std::vector<proto::VariableSpec> pieces;
    if (options.dense_piece_bytes > 0) {
      PST_ASSIGN_OR_RETURN(pieces, common::SplitDense(spec, options.dense_piece_bytes));
    } else if (num_ps > 1) {
      PST_ASSIGN_OR_RETURN(pieces, common::SplitVariable(spec, num_ps, proto::DIV));
    } else {
      pieces.push_back(spec);
    }
    specs.insert(specs.end(), pieces.begin(), pieces.end());
  }
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan placed, common::PlaceSizeBalanced(specs, num_ps));
  return std::vector<proto::PlacementPlan::Entry>(placed.variables().begin(),
                                                  placed.variables().end());
}

}  // namespace

std::string DenseName(int64_t size) { return absl::StrCat("bench_dense_", size); }

absl::StatusOr<proto::PlacementPlan> BuildPlan(const Options& options, int num_ps) {
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  plan.set_policy("ps_bench");
  if (options.AnyDense()) {
    PST_ASSIGN_OR_RETURN(std::vector<proto::PlacementPlan::Entry> entries,
                         DenseEntries(options, num_ps));
    for (proto::PlacementPlan::Entry& entry : entries) *plan.add_variables() = std::move(entry);
  }
  if (options.AnySparse()) {
    proto::VariableSpec table;
    table.set_name(kTable);
    table.set_dtype(proto::DT_FLOAT32);
    table.add_shape(options.table_rows);
    table.add_shape(options.dim);
    table.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    // As the chief's default partitioner (min_max, 256 KiB slices, at most
    // 4 per ps), with 'mod' routing; partition p on ps p % P.
    PST_ASSIGN_OR_RETURN(
        const int parts,
        common::MinMaxPartitions(options.table_rows, options.dim * 4, 256 << 10, 4 * num_ps));
    PST_ASSIGN_OR_RETURN(std::vector<proto::VariableSpec> split,
                         common::SplitVariable(table, parts, proto::MOD));
    for (size_t p = 0; p < split.size(); ++p) {
      proto::PlacementPlan::Entry* entry = plan.add_variables();
      *entry->mutable_spec() = split[p];
      entry->set_ps_index(static_cast<int>(p) % num_ps);
    }
  }
  return plan;
}

absl::Status AddHashTable(const std::string& name, int dim, int64_t capacity,
                          const std::string& eviction, proto::PlacementPlan* plan) {
  proto::VariableSpec table;
  table.set_name(name);
  table.set_dtype(proto::DT_FLOAT32);
  table.add_shape(0);
  table.add_shape(dim);
  table.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  table.set_capacity(capacity);
  table.set_eviction(eviction);
  PST_ASSIGN_OR_RETURN(std::vector<proto::VariableSpec> split,
                       common::SplitVariable(table, plan->num_ps(), proto::HASH));
  for (size_t p = 0; p < split.size(); ++p) {
    proto::PlacementPlan::Entry* entry = plan->add_variables();
    *entry->mutable_spec() = split[p];
    entry->set_ps_index(static_cast<int>(p) % plan->num_ps());
  }
  return absl::OkStatus();
}

int64_t PlanBytes(const proto::PlacementPlan& plan) {
  int64_t bytes = 0;
  for (const auto& entry : plan.variables()) {
    int64_t n = 4;
    for (int64_t d : entry.spec().shape()) n *= d;
    bytes += n;
  }
  return bytes;
}

}  // namespace pst::bench
