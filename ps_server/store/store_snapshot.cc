// VariableStore's snapshot for a checkpoint (variable_store.h: Snapshot):
// a copy of every variable at one instant, and the cut of each worker's
// pushes it holds (SyncLedger::Cut); and Digest, a hash of a snapshot.
#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "ps_server/store/table_precopy.h"
#include "ps_server/store/variable.h"
#include "ps_server/store/variable_store.h"
#include "spdlog/spdlog.h"

namespace pst::ps {

namespace {

// A hash record's rows: every row of `var`'s table, or (`only`) those of
// these ids, ascending, with the ids no longer stored as removed ones.
// Each with its index entry when bounded, so that a restore evicts in the
// order this table would have.
absl::Status FillHashRows(const Variable& var, int num_slots, const std::vector<int64_t>* only,
                          common::ShardRecord* r) ABSL_SHARED_LOCKS_REQUIRED(var.mu) {
  const int64_t dim = var.dim;
  r->values.reserve((only != nullptr ? only->size() : var.table.size()) * dim);
  r->slots.assign(num_slots, {});
  auto take = [&](int64_t id, std::span<const float> row,
                  const EvictionIndex::Entry* e) -> absl::Status {
    AppendRow(r, dim, num_slots, id, row, e);
    return absl::OkStatus();
  };
  PST_RETURN_IF_ERROR(only == nullptr
                          ? var.table.ForEachRow(r->version, take)
                          : var.table.ForRows(*only, r->version, take, &r->removed_ids));
  r->rows = static_cast<int64_t>(r->hash_ids.size());
  return absl::OkStatus();
}

}  // namespace

// One hash table in memory copied while pushes go on (Snapshot).
struct VariableStore::Precopy {
  Variable* var = nullptr;
  std::unique_ptr<TablePrecopy> copy;  // null: it failed (spilling)
  std::vector<int64_t> changed;        // ids noted since it began, ascending
  // Its record, once its changed rows are in it (none when a restore
  // replaced rows during the copy: the table is copied whole then).
  size_t record = SIZE_MAX;
};

std::vector<VariableStore::Precopy> VariableStore::TakePrecopies(
    const std::string& spill_dir) const {
  std::vector<Precopy> precopies;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, var] : variables_) {
      if (!var->is_hash || var->table.has_disk()) continue;
      absl::MutexLock var_lock(&var->mu);
      var->table.BeginPrecopy();
      Precopy p;
      p.var = var.get();
      precopies.push_back(std::move(p));
    }
  }
  // From here on pushes change rows as they will, each change noted; the
  // instant copies those rows again.
  for (Precopy& p : precopies) {
    std::vector<int64_t> ids;
    {
      absl::ReaderMutexLock var_lock(&p.var->mu);
      ids = p.var->table.MemoryIds();
    }
    absl::StatusOr<std::unique_ptr<TablePrecopy>> copy =
        TablePrecopy::Create(spill_dir, p.var->dim, p.var->optimizer.num_slots());
    absl::Status added = copy.status();
    if (added.ok()) {
      p.var->CopyStoredRows(
          ids, [&](int64_t id, std::span<const float> row, const EvictionIndex::Entry* e) {
            if (added.ok()) added = (*copy)->Add(id, row, e);
          });
    }
    if (!added.ok()) {
      // Copied whole at the instant instead.
      spdlog::warn("copying '{}' before a save's instant: {}", p.var->spec.name(),
                   added.ToString());
      continue;
    }
    p.copy = *std::move(copy);
  }
  return precopies;
}

std::vector<common::ShardRecord> VariableStore::Snapshot(absl::Duration* held, Cut* cut,
                                                         double copy_budget,
                                                         const SnapshotChanges* changes,
                                                         const std::string& spill_dir) const {
  // Copy-on-write saves copy the hash tables in memory before the instant,
  // while pushes go on, and at the instant only the rows changed since
  // (an incremental snapshot copies only changed rows anyway).
  std::vector<Precopy> precopies;
  std::optional<absl::MutexLock> one_at_a_time;
  if (copy_budget > 0 && (changes == nullptr || changes->base.empty())) {
    one_at_a_time.emplace(&precopy_mu_);
    precopies = TakePrecopies(spill_dir);
  }
  std::vector<common::ShardRecord> records =
      SnapshotAt(held, cut, copy_budget, changes, &precopies);
  // Made whole with the store let go.
  for (Precopy& p : precopies) {
    if (p.record >= records.size()) continue;
    if (absl::Status done = p.copy->Complete(std::move(p.changed), &records[p.record]);
        !done.ok()) {
      if (cut != nullptr) cut->error = done;
      return {};
    }
  }
  return records;
}

std::vector<common::ShardRecord> VariableStore::SnapshotAt(absl::Duration* held, Cut* cut,
                                                           double copy_budget,
                                                           const SnapshotChanges* changes,
                                                           std::vector<Precopy>* precopies) const {
  if (held != nullptr) *held = absl::ZeroDuration();
  const bool copy_on_write = copy_budget > 0;
  // Allocate (and fault in) the copies of the dense variables first, while
  // training goes on: pushes are held only for the copy itself. Copy-on-
  // write: the copies' budget instead, a share of what they would take.
  absl::flat_hash_map<std::string, common::ShardRecord> ready;
  std::shared_ptr<CopyBudget> budget;
  {
    absl::ReaderMutexLock lock(&mu_);
    double dense_bytes = 0;
    for (const auto& [name, var] : variables_) {
      if (var->is_hash) continue;
      const size_t n = static_cast<size_t>(var->rows * var->dim);
      const int num_slots = var->optimizer.num_slots();
      if (copy_on_write) {
        dense_bytes += static_cast<double>(n * sizeof(float) * (1 + num_slots));
        continue;
      }
      common::ShardRecord& r = ready[name];
      r.values.resize(n);
      r.slots.assign(num_slots, std::vector<float>(n));
    }
    if (copy_on_write) {
      budget = std::make_shared<CopyBudget>(static_cast<int64_t>(dense_bytes * copy_budget));
    }
  }
  // The store held exclusively: no push is half-way through, none starts,
  // and the records and the cut describe one instant.
  absl::MutexLock lock(&mu_);
  const absl::Time locked = absl::Now();
  std::vector<Variable*> vars;
  for (const auto& [name, var] : variables_) vars.push_back(var.get());
  std::sort(vars.begin(), vars.end(),
            [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  // The pre-copied tables: which rows changed since their copy began.
  absl::flat_hash_map<const Variable*, Precopy*> precopy_of;
  for (Precopy& p : *precopies) {
    absl::MutexLock var_lock(&p.var->mu);
    std::optional<HashRowTable::ChangedIds> noted = p.var->table.EndPrecopy();
    // Replaced meanwhile, or the copy failed: copied whole below.
    if (!noted.has_value() || p.copy == nullptr) continue;
    for (const auto& stripe : *noted)
      p.changed.insert(p.changed.end(), stripe.begin(), stripe.end());
    std::sort(p.changed.begin(), p.changed.end());
    p.changed.erase(std::unique(p.changed.begin(), p.changed.end()), p.changed.end());
    precopy_of[p.var] = &p;
  }
  // A save's chain, at the instant: the changes noted up to it close an
  // interval; an incremental snapshot keeps only what changed since its
  // base.
  bool incremental = false;
  absl::flat_hash_map<std::string, std::vector<int64_t>> changed_rows;
  ChangeLog::Versions base_versions;
  if (changes != nullptr) {
    absl::MutexLock changes_lock(&changes_mu_);
    ChangeLog::Versions versions;
    for (const Variable* var : vars) versions[var->spec.name()] = var->version.load();
    if (!changes->track) {
      changes_.Stop();
      for (Variable* var : vars) {
        absl::MutexLock var_lock(&var->mu);
        if (var->is_hash) var->table.TrackChanges(false);
      }
    } else {
      incremental = !changes->base.empty();
      if (incremental && !changes_.IsBase(changes->base, versions)) {
        if (cut != nullptr) cut->base_unknown = true;
        return {};
      }
      if (!changes_.on()) changes_.Start();
      absl::flat_hash_map<std::string, HashRowTable::ChangedIds> taken;
      for (Variable* var : vars) {
        if (!var->is_hash) continue;
        absl::MutexLock var_lock(&var->mu);
        if (var->table.tracks_changes()) {
          taken[var->spec.name()] = var->table.TakeChanges();
        } else {
          var->table.TrackChanges(true);  // a full snapshot holds its rows
        }
      }
      if (incremental) {
        for (const Variable* var : vars) {
          const std::string& name = var->spec.name();
          base_versions[name] = changes_.BaseVersion(name);
        }
      }
      const int64_t seq = changes_.Close(std::move(taken), std::move(versions));
      if (cut != nullptr) cut->seq = seq;
      if (incremental) {
        for (const Variable* var : vars) {
          if (!var->is_hash) continue;
          changed_rows[var->spec.name()] = changes_.ChangedSinceBase(var->spec.name());
        }
      }
    }
  }
  std::vector<common::ShardRecord> records;
  records.reserve(vars.size());
  std::vector<std::pair<const Variable*, size_t>> held_dense;  // copy-on-write: record index
  bool sync_pending = false, holds_dense = false;
  int64_t max_version = 0;
  // SYNC moves row variables one version per step too (their pushes summed
  // per step), as the dense ones: a ps that holds rows summed and not
  // applied, or row variables at another version than each other or than
  // its dense variables, holds part of a step.
  const bool sync = ledger_.mode() == proto::SYNC;
  int64_t rows_min = -1, rows_max = -1, others_max = -1;
  for (const Variable* var : vars) {
    holds_dense |= !var->is_hash;
    RowSync* rows = sync ? RowSyncOf(*var, /*make=*/false) : nullptr;
    if (rows != nullptr) {
      absl::MutexLock sync_lock(&rows->mu);
      sync_pending |= rows->aggregate.pending() && rows->generation == generation_ &&
                      rows->step == var->version.load();
    }
    WholeReadLock var_lock(*var);
    sync_pending |= !var->contributors.empty();
    if (sync) {
      const int64_t v = var->version.load();
      max_version = std::max(max_version, v);
      if (rows == nullptr) {
        others_max = std::max(others_max, v);
      } else {
        rows_min = rows_min < 0 ? v : std::min(rows_min, v);
        rows_max = std::max(rows_max, v);
      }
    }
    // Incremental: a dense variable at its base's version is not saved
    // again (the cut's figures above still count it).
    if (incremental && !var->is_hash && base_versions[var->spec.name()] == var->version.load()) {
      continue;
    }
    common::ShardRecord r;
    if (auto it = ready.find(var->spec.name()); it != ready.end()) r = std::move(it->second);
    r.spec = var->spec;
    r.version = var->version;
    if (!var->is_hash && copy_on_write) {
      // The record will read the variable itself (its hold is made below,
      // once this variable's read lock is gone).
      max_version = std::max(max_version, r.version);
      r.rows = var->rows;
      held_dense.emplace_back(var, records.size());
    } else if (!var->is_hash) {
      max_version = std::max(max_version, r.version);
      const size_t n = static_cast<size_t>(var->rows * var->dim);
      r.rows = var->rows;
      bool same_shape = r.values.size() == n && var->values.size() == n &&
                        var->slots.size() == r.slots.size();
      for (size_t i = 0; same_shape && i < r.slots.size(); ++i) {
        same_shape = r.slots[i].size() == n && var->slots[i].size() == n;
      }
      if (same_shape) {
        std::copy(var->values.begin(), var->values.end(), r.values.begin());
        for (size_t i = 0; i < r.slots.size(); ++i) {
          std::copy(var->slots[i].begin(), var->slots[i].end(), r.slots[i].begin());
        }
      } else {  // created after the first pass
        r.values = var->values;
        r.slots = var->slots;
      }
    } else if (incremental) {
      // The rows changed since the base, whatever tier holds them.
      if (absl::Status read =
              FillHashRows(*var, var->optimizer.num_slots(), &changed_rows[var->spec.name()], &r);
          !read.ok()) {
        if (cut != nullptr) cut->error = read;
        return {};
      }
    } else if (var->table.has_disk()) {
      // Streamed (table_cut.h): the rows in memory go to a scratch table
      // on disk, so that neither tier is copied into RAM.
      absl::StatusOr<std::unique_ptr<common::ShardRowStream>> stream =
          var->table.Cut(r.version, options_.disk_tier);
      if (!stream.ok()) {
        if (cut != nullptr) cut->error = stream.status();
        return {};
      }
      r.stream = *std::move(stream);
      r.stream_slots = var->optimizer.num_slots();
    } else if (auto p = precopy_of.find(var); p != precopy_of.end()) {
      // Pre-copied: the rows changed since, whole (MergePrecopy, after).
      if (absl::Status read =
              FillHashRows(*var, var->optimizer.num_slots(), &p->second->changed, &r);
          !read.ok()) {
        if (cut != nullptr) cut->error = read;
        return {};
      }
      r.removed_ids.clear();  // gone from a full record: not in it
      p->second->record = records.size();
    } else if (absl::Status read = FillHashRows(*var, var->optimizer.num_slots(), nullptr, &r);
               !read.ok()) {
      // Every row is in memory.
      if (cut != nullptr) cut->error = read;
      return {};
    }
    // And which ids were close to admission.
    if (const AdmissionFilter* admission = var->is_hash ? var->table.admission() : nullptr) {
      r.admission = admission->Serialize();
    }
    records.push_back(std::move(r));
  }
  // Still at the instant (the store held exclusively): each dense record
  // of a copy-on-write snapshot reads its variable when written, and a
  // change before that lets the hold copy it first.
  for (const auto& [var, index] : held_dense) {
    absl::MutexLock var_lock(&var->mu);
    var->PreserveForSnapshotLocked(/*force=*/true);  // an older snapshot's, never written
    auto hold = std::make_shared<DenseSnapshotHold>(&var->values, &var->slots, budget);
    var->snapshot_hold = hold;
    records[index].dense = std::make_shared<DenseSnapshotSource>(std::move(hold));
    records[index].dense_slots = static_cast<int>(var->slots.size());
  }
  if (rows_min != rows_max || (rows_max >= 0 && others_max >= 0 && rows_max != others_max)) {
    sync_pending = true;
  }
  if (cut != nullptr) {
    cut->workers = ledger_.Cut();
    cut->sync_pending = sync_pending;
    cut->holds_dense = holds_dense;
    cut->holds_any = !vars.empty();
    cut->max_version = max_version;
  }
  if (held != nullptr) *held = absl::Now() - locked;
  return records;
}

void VariableStore::SnapshotWritten(int64_t seq, const std::string& checkpoint) {
  absl::MutexLock lock(&changes_mu_);
  changes_.Written(seq, checkpoint);
}

namespace {

// FNV-1a, 64 bits.
class Fnv {
 public:
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ULL;
  }
  template <typename T>
  void AddValue(const T& v) {
    Add(&v, sizeof(v));
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace

absl::StatusOr<uint64_t> VariableStore::Digest() const {
  Cut cut;
  std::vector<common::ShardRecord> records = Snapshot(nullptr, &cut);
  if (!cut.error.ok()) return cut.error;
  Fnv fnv;
  for (const common::ShardRecord& r : records) {  // sorted by name
    fnv.Add(r.spec.name().data(), r.spec.name().size());
    fnv.AddValue(r.version);
    if (r.stream != nullptr) {
      // In id order already; a row's values and slots are contiguous.
      absl::StatusOr<int64_t> rows = r.stream->Count();
      if (!rows.ok()) return rows.status();
      fnv.AddValue(*rows);
      absl::Status s = r.stream->ForEach(
          [&](int64_t id, std::span<const float> row, int64_t, double) -> absl::Status {
            fnv.AddValue(id);
            fnv.Add(row.data(), row.size() * sizeof(float));
            return absl::OkStatus();
          });
      if (!s.ok()) return s;
      continue;
    }
    fnv.AddValue(r.rows);
    const size_t dim = r.rows > 0 ? r.values.size() / static_cast<size_t>(r.rows) : 0;
    std::vector<size_t> order(static_cast<size_t>(r.rows));
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (!r.hash_ids.empty()) {
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return r.hash_ids[a] < r.hash_ids[b]; });
    }
    for (size_t row : order) {
      if (!r.hash_ids.empty()) fnv.AddValue(r.hash_ids[row]);
      fnv.Add(r.values.data() + row * dim, dim * sizeof(float));
      for (const std::vector<float>& slot : r.slots) {
        fnv.Add(slot.data() + row * dim, dim * sizeof(float));
      }
    }
  }
  return fnv.value();
}

}  // namespace pst::ps
