// StoreRestorer (store_restorer.h), and VariableStore::Restore over it.
#include "ps_server/store/store_restorer.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/optimizer_config.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "ps_server/store/store_internal.h"
#include "ps_server/store/variable.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using store_internal::LogicalName;

// The `last` of a staged row the checkpoint gave no entry.
constexpr int64_t kNoEntry = std::numeric_limits<int64_t>::min();

// The global row of local row r of `spec` (whole variables: r itself).
int64_t GlobalRow(const proto::VariableSpec& spec, int64_t r) {
  if (spec.variable().empty() || spec.routing() == proto::ROUTING_NONE) return r;
  return spec.row_offset() + r * spec.row_stride();
}
// The local row holding global row g in `spec`, or -1 if another partition
// holds it.
int64_t LocalRow(const proto::VariableSpec& spec, int64_t rows, int64_t g) {
  if (spec.variable().empty() || spec.routing() == proto::ROUTING_NONE) {
    return g >= 0 && g < rows ? g : -1;
  }
  const int64_t stride = spec.row_stride() > 0 ? spec.row_stride() : 1;
  const int64_t d = g - spec.row_offset();
  if (d < 0 || d % stride != 0 || d / stride >= rows) return -1;
  return d / stride;
}

}  // namespace

// One variable's new contents, built from the records absorbed so far.
struct StoreRestorer::Loaded {
  Variable* var = nullptr;
  bool seen = false;  // some record of its logical variable was absorbed
  int64_t version = 0;
  std::vector<float> values;
  std::vector<std::vector<float>> slots;
  std::vector<int> filled;  // dense: the link each row was loaded from (-1: none yet)
  int64_t rows_filled = 0;
  HashRowTable::Rows hash_rows;
  HashRowTable::Entries entries;  // bounded: the checkpoint's index entries
  // The admission counts: this partition's own (the same partitioning),
  // or every old partition's merged (AdmissionFilter::MergeMax).
  std::optional<AdmissionFilter> admission;
  bool own_admission = false;
  int admission_link = -1;  // the link `admission` is of
  // A table with a disk tier takes its rows into a scratch table of the
  // tier instead of hash_rows (AbsorbRows): none of it held in RAM.
  std::unique_ptr<DiskTier::Scratch> staged;
  // Saved with another optimizer, restored with fresh slots (reset_slots).
  bool reset = false;
};

StoreRestorer::StoreRestorer(VariableStore* store, bool reset_slots)
    : store_(store), reset_slots_(reset_slots) {
  absl::ReaderMutexLock lock(&store->mu_);
  for (const auto& [name, var] : store->variables_) {
    auto l = std::make_unique<Loaded>();
    l->var = var.get();
    by_logical_[LogicalName(var->spec)].push_back(l.get());
    loaded_.push_back(std::move(l));
  }
}

StoreRestorer::~StoreRestorer() = default;

std::unique_ptr<StoreRestorer> VariableStore::BeginRestore(bool reset_slots) {
  return std::unique_ptr<StoreRestorer>(new StoreRestorer(this, reset_slots));
}

namespace {

// "adam (tensorflow form; slots m, v)".
std::string Describe(const proto::OptimizerConfig& config) {
  const std::vector<std::string> slots = common::OptimizerSlotNames(config);
  return absl::StrCat(config.name(), " (", common::OptimizerForm(config), " form; ",
                      slots.empty() ? "no slots" : "slots " + absl::StrJoin(slots, ", "), ")");
}

}  // namespace

absl::Status StoreRestorer::CheckOptimizer(const common::ShardRecord& r, Loaded* l) const {
  const proto::OptimizerConfig& here = l->var->optimizer.config();
  const int num_slots = l->var->optimizer.num_slots();
  bool same;
  std::string saved;
  if (r.spec.has_optimizer()) {
    const proto::OptimizerConfig& was = r.spec.optimizer();
    same = was.name() == here.name() && common::OptimizerForm(was) == common::OptimizerForm(here) &&
           common::OptimizerSlotNames(was) == common::OptimizerSlotNames(here);
    saved = Describe(was);
  } else {  // saved before variables carried their optimizer
    same = static_cast<int>(r.slots.size()) == num_slots;
    saved = absl::StrCat("an optimizer with ", r.slots.size(), " slot(s)");
  }
  if (same) {
    if (static_cast<int>(r.slots.size()) == num_slots) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("variable '", r.spec.name(), "' has ", r.slots.size(),
                     " optimizer slot(s) in the checkpoint but its optimizer keeps ", num_slots));
  }
  if (!reset_slots_) {
    return absl::FailedPreconditionError(
        absl::StrCat("variable '", LogicalName(r.spec), "' was saved with ", saved,
                     " but trains with ", Describe(here),
                     " here: restore with reset_slots (pstrain's --reset_slots) to keep its "
                     "values and start its slots afresh"));
  }
  l->reset = true;
  return absl::OkStatus();
}

bool StoreRestorer::Holds(const proto::VariableSpec& spec) const {
  return by_logical_.contains(LogicalName(spec));
}

bool StoreRestorer::Streams(const proto::VariableSpec& spec) const {
  auto it = by_logical_.find(LogicalName(spec));
  if (it == by_logical_.end()) return false;
  for (const Loaded* l : it->second) {
    if (l->var->is_hash && l->var->table.has_disk()) return true;
  }
  return false;
}

absl::Status StoreRestorer::AbsorbRows(const common::ShardRecord& r,
                                       const common::ShardRowChunk& chunk) {
  auto it = by_logical_.find(LogicalName(r.spec));
  if (it == by_logical_.end()) return absl::OkStatus();
  std::vector<float> rows;
  std::vector<DiskTier::Row> batch;
  for (Loaded* l : it->second) {
    const Variable& var = *l->var;
    if (!var.is_hash) continue;
    const int num_slots = var.optimizer.num_slots();
    const int64_t width = chunk.dim * (1 + num_slots);
    // Absorb checked the record's optimizer first: its slots are this
    // one's, or reset.
    if (chunk.dim != var.dim || (!l->reset && static_cast<int>(chunk.slots.size()) != num_slots)) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable '", LogicalName(r.spec), "' has rows of ", chunk.dim, " with ",
                       chunk.slots.size(), " slot(s) in the checkpoint but ", var.dim, " with ",
                       num_slots, " here"));
    }
    const bool disk = var.table.has_disk();
    if (disk && l->staged == nullptr) {
      PST_ASSIGN_OR_RETURN(l->staged, store_->options_.disk_tier->NewScratch(width));
    }
    rows.clear();
    rows.reserve(static_cast<size_t>(chunk.n * width));  // the batch points into it
    batch.clear();
    for (int64_t k = 0; k < chunk.n; ++k) {
      const int64_t id = chunk.ids[k];
      if (common::HashPartition(id, var.spec.num_partitions()) != var.spec.partition()) continue;
      const size_t at = rows.size();
      rows.insert(rows.end(), chunk.values + k * chunk.dim, chunk.values + (k + 1) * chunk.dim);
      for (int s = 0; s < num_slots; ++s) {
        if (l->reset) {
          rows.insert(rows.end(), chunk.dim, var.optimizer.SlotInitialValue(s));
        } else {
          rows.insert(rows.end(), chunk.slots[s] + k * chunk.dim,
                      chunk.slots[s] + (k + 1) * chunk.dim);
        }
      }
      std::span<const float> row(rows.data() + at, static_cast<size_t>(width));
      if (disk) {
        // No entry: "updated at the restored version" (Commit), as Replace.
        batch.push_back({id, row, chunk.last != nullptr ? chunk.last[k] : kNoEntry,
                         chunk.count != nullptr ? chunk.count[k] : 0.0});
        continue;
      }
      l->hash_rows[id].assign(row.begin(), row.end());
      if (chunk.last != nullptr) l->entries[id] = {chunk.last[k], chunk.count[k], 0.0};
    }
    if (disk) PST_RETURN_IF_ERROR(l->staged->Put(batch));
  }
  return absl::OkStatus();
}

absl::Status StoreRestorer::Absorb(const common::ShardRecord& r) {
  auto it = by_logical_.find(LogicalName(r.spec));
  if (it == by_logical_.end()) return absl::OkStatus();  // none of it is held here
  for (Loaded* l : it->second) {
    // Only the const parts of a Variable are read here (spec, rows, dim).
    const Variable& var = *l->var;
    const int64_t dim = var.dim;
    // A record not kept (its rows read by AbsorbRows) has no values.
    const bool held = !r.values.empty();
    const int64_t rdim = held ? static_cast<int64_t>(r.values.size()) / r.rows : dim;
    if (held && rdim != dim) {
      return absl::FailedPreconditionError(absl::StrCat("variable '", LogicalName(r.spec),
                                                        "' has rows of ", rdim,
                                                        " in the checkpoint but ", dim, " here"));
    }
    PST_RETURN_IF_ERROR(CheckOptimizer(r, l));
    const int num_slots = var.optimizer.num_slots();
    // The record's slots, or (reset) each slot's initial value.
    auto slot_row = [&](int s, int64_t k, float* out) {
      if (l->reset) {
        std::fill_n(out, dim, var.optimizer.SlotInitialValue(s));
      } else {
        std::copy_n(&r.slots[s][k * dim], dim, out);
      }
    };
    l->seen = true;
    l->version = std::max(l->version, r.version);
    if (var.is_hash) {
      PST_RETURN_IF_ERROR(AbsorbRemoved(r, l));
      for (int64_t k = 0; k < static_cast<int64_t>(r.hash_ids.size()); ++k) {
        const int64_t id = r.hash_ids[k];
        if (common::HashPartition(id, var.spec.num_partitions()) != var.spec.partition()) continue;
        std::vector<float> row(dim * (1 + num_slots));
        std::copy_n(&r.values[k * dim], dim, row.begin());
        for (int s = 0; s < num_slots; ++s) slot_row(s, k, &row[(s + 1) * dim]);
        l->hash_rows[id] = std::move(row);
        if (!r.row_last.empty()) l->entries[id] = {r.row_last[k], r.row_count[k], 0.0};
      }
      PST_RETURN_IF_ERROR(AbsorbAdmission(r, l));
      continue;
    }
    if (l->filled.empty() && var.rows > 0) {
      l->values.assign(var.rows * dim, 0.0f);
      l->slots.assign(num_slots, std::vector<float>(var.rows * dim, 0.0f));
      l->filled.assign(var.rows, -1);
    }
    for (int64_t k = 0; k < r.rows; ++k) {
      // A row once per link (the first record that has it); a later
      // link's replaces it.
      const int64_t local = LocalRow(var.spec, var.rows, GlobalRow(r.spec, k));
      if (local < 0 || l->filled[local] == link_) continue;
      if (l->filled[local] < 0) ++l->rows_filled;
      l->filled[local] = link_;
      std::copy_n(&r.values[k * dim], dim, &l->values[local * dim]);
      for (int s = 0; s < num_slots; ++s) slot_row(s, k, &l->slots[s][local * dim]);
    }
  }
  return absl::OkStatus();
}

absl::Status StoreRestorer::AbsorbRemoved(const common::ShardRecord& r, Loaded* l) {
  if (r.removed_ids.empty()) return absl::OkStatus();
  const proto::VariableSpec& spec = l->var->spec;
  std::vector<int64_t> mine;
  for (int64_t id : r.removed_ids) {
    if (common::HashPartition(id, spec.num_partitions()) != spec.partition()) continue;
    l->hash_rows.erase(id);
    l->entries.erase(id);
    mine.push_back(id);
  }
  if (l->staged != nullptr && !mine.empty()) PST_RETURN_IF_ERROR(l->staged->Delete(mine));
  return absl::OkStatus();
}

absl::Status StoreRestorer::AbsorbAdmission(const common::ShardRecord& r, Loaded* l) {
  if (l->admission_link != link_) {
    // A later link's counts replace the earlier one's (every link holds a
    // record of every table).
    l->admission.reset();
    l->own_admission = false;
    l->admission_link = link_;
  }
  if (r.admission.empty() || l->own_admission) return absl::OkStatus();
  absl::StatusOr<AdmissionFilter> filter = AdmissionFilter::Deserialize(r.admission);
  if (!filter.ok()) {
    return absl::DataLossError(absl::StrCat("the admission counts of '", r.spec.name(),
                                            "' in the checkpoint: ", filter.status().message()));
  }
  const proto::VariableSpec& spec = l->var->spec;
  if (r.spec.name() == spec.name() && r.spec.num_partitions() == spec.num_partitions()) {
    // The same partition: its counts exactly.
    l->admission = *std::move(filter);
    l->own_admission = true;
  } else if (!l->admission.has_value()) {
    l->admission = *std::move(filter);
  } else {
    // Filters of another size (--admission_filter_bytes changed) are not
    // merged: the first one stands.
    l->admission->MergeMax(*filter).IgnoreError();
  }
  return absl::OkStatus();
}

absl::Status StoreRestorer::Commit(int64_t generation) {
  if (committed_) return absl::FailedPreconditionError("this restore was committed already");
  for (const auto& l : loaded_) {
    const Variable& var = *l->var;
    if (!l->seen) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint has no variable '", LogicalName(var.spec), "' (for '", var.spec.name(), "')"));
    }
    if (!var.is_hash && l->rows_filled != var.rows) {
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint holds ", l->rows_filled,
                                                        " of the ", var.rows, " rows of '",
                                                        var.spec.name(), "'"));
    }
  }
  // Swap everything in under the exclusive lock: no push is half-way through
  // when the values and the generation change, and every later push is
  // checked against the new generation.
  std::vector<SyncLedger::Waiter> parked;
  absl::Status disk;  // the first disk tier error, the rows all in memory
  {
    absl::MutexLock lock(&store_->mu_);
    if (store_->variables_.size() != loaded_.size()) {
      return absl::FailedPreconditionError(
          "variables were created while the checkpoint was read; restore again");
    }
    for (const auto& l : loaded_) {
      Variable& var = *l->var;
      absl::MutexLock var_lock(&var.mu);
      var.version = l->version;
      var.accum.clear();
      var.contributors.clear();
      if (var.is_hash) {
        // And forgets touch counts.
        absl::Status replaced = var.table.Replace(std::move(l->hash_rows), l->version,
                                                  l->entries, std::move(l->admission));
        if (replaced.ok() && l->staged != nullptr) replaced = LoadStaged(*l);
        if (disk.ok()) disk = replaced;
      } else {
        var.PreserveForSnapshotLocked(/*force=*/true);  // a restore waits for no writer
        var.values = std::move(l->values);
        var.slots = std::move(l->slots);
      }
    }
    store_->generation_ = generation;
    {
      // The state is the checkpoint's now, no snapshot's of this store: the
      // next incremental one has no base.
      absl::MutexLock changes_lock(&store_->changes_mu_);
      store_->changes_.Forget();
    }
    // SYNC rows summed before belong to the replaced state, even when the
    // generation and the versions come out the same (a RowSync would take
    // them for current). The map's mutex is never held while taking
    // another lock.
    std::vector<VariableStore::RowSync*> row_syncs;
    {
      absl::MutexLock map_lock(&store_->row_sync_mu_);
      for (const auto& [name, sync] : store_->row_sync_) row_syncs.push_back(sync.get());
    }
    for (VariableStore::RowSync* sync : row_syncs) {
      absl::MutexLock sync_lock(&sync->mu);
      if (sync->aggregate.pending()) sync->aggregate.TakeMean();  // dropped
    }
    // Clocks and duplicate detection restart; parked pulls waited for
    // versions or clocks of the replaced state.
    parked = store_->ledger_.Reset();
  }
  committed_ = true;
  for (SyncLedger::Waiter& w : parked) {
    w.done(absl::AbortedError(
        "the ps was restored from a checkpoint while this call waited; pull again"));
  }
  return disk;
}

absl::Status StoreRestorer::LoadStaged(Loaded& l) {
  HashRowTable& table = l.var->table;
  const bool lfu = table.limits().policy.eviction == common::TablePolicy::Eviction::kLfu;
  std::unique_ptr<DiskTier::View> view = l.staged->Seal();
  l.staged.reset();
  // Row by row: past the capacity, the policy's first rows go to disk, so
  // memory holds the rows the policy keeps, as Replace would leave it.
  std::unique_ptr<DiskTier::Cursor> c = view->Scan();
  for (; c->Valid(); c->Next()) {
    EvictionIndex::Entry entry{c->last(), c->count(), 0.0};
    if (entry.last == kNoEntry) entry = {l.version, lfu ? 1.0 : 0.0, 0.0};  // as a fresh Note
    table.LoadRow(c->id(), reinterpret_cast<const char*>(c->row().data()), entry);
  }
  table.FlushEvictions();
  return c->status();
}

absl::Status AbsorbShard(common::ShardReader& reader,
                         std::span<StoreRestorer* const> restorers) {
  auto holds = [&](const proto::VariableSpec& spec) {
    for (const StoreRestorer* r : restorers) {
      if (r->Holds(spec)) return true;
    }
    return false;
  };
  auto streams = [&](const proto::VariableSpec& spec) {
    for (const StoreRestorer* r : restorers) {
      if (r->Streams(spec)) return true;
    }
    return false;
  };
  // Records of variables no restorer holds are checked, not kept; those of
  // tables with rows on disk are read row by row, never whole.
  auto keep = [&](const proto::VariableSpec& spec) { return holds(spec) && !streams(spec); };
  while (true) {
    common::ShardRecord record;
    common::ShardRowsLayout layout;
    PST_ASSIGN_OR_RETURN(const bool more, reader.Next(&record, keep, &layout));
    if (!more) return absl::OkStatus();
    if (!holds(record.spec)) continue;
    for (StoreRestorer* r : restorers) {
      if (r->Holds(record.spec)) PST_RETURN_IF_ERROR(r->Absorb(record));
    }
    if (layout.offsets.empty()) continue;  // kept whole
    PST_RETURN_IF_ERROR(reader.ReadRows(layout, [&](const common::ShardRowChunk& chunk) {
      for (StoreRestorer* r : restorers) {
        if (r->Holds(record.spec)) PST_RETURN_IF_ERROR(r->AbsorbRows(record, chunk));
      }
      return absl::OkStatus();
    }));
  }
}

absl::Status VariableStore::Restore(const std::vector<const common::ShardRecord*>& records,
                                    int64_t generation) {
  std::unique_ptr<Restorer> restorer = BeginRestore();
  for (const common::ShardRecord* r : records) PST_RETURN_IF_ERROR(restorer->Absorb(*r));
  return restorer->Commit(generation);
}

}  // namespace pst::ps
