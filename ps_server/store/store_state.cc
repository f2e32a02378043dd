// VariableStore's whole state, for a backup that starts its copy over
// (variable_store.h: ExportState, LoadState).
#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "ps_server/store/state_export.h"
#include "ps_server/store/table_cut.h"
#include "ps_server/store/variable.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

void AppendFloats(const float* data, int64_t n, std::string* out) {
  out->append(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * sizeof(float));
}

// Parts filled one after the other, each closed once it holds `budget`
// bytes, with one VariableChunk per variable per part.
class PartFiller {
 public:
  explicit PartFiller(int64_t budget) : budget_(budget) {}
  // The chunk of `var` to add `bytes` more to: in the last part, or a new
  // one when that is full. A chunk with row_begin is never added to (dense
  // rows: one chunk per range).
  proto::VariableChunk* Room(const std::string& name, int64_t version, int64_t bytes,
                             bool new_chunk = false) {
    if (parts_.empty() || (used_ > 0 && used_ + bytes > budget_)) {
      parts_.emplace_back();
      used_ = 0;
      chunk_ = nullptr;
    }
    used_ += bytes;
    if (chunk_ == nullptr || new_chunk || chunk_->name() != name) {
      chunk_ = parts_.back().add_variables();
      chunk_->set_name(name);
      chunk_->set_version(version);
    }
    return chunk_;
  }
  std::deque<proto::StoreChunk> Take() { return std::move(parts_); }

 private:
  const int64_t budget_;
  int64_t used_ = 0;
  // A deque: the chunk pointer stays valid as parts are added.
  std::deque<proto::StoreChunk> parts_;
  proto::VariableChunk* chunk_ = nullptr;
};

absl::Status BadChunk(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("store state: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateExport>> VariableStore::ExportState(
    int64_t part_bytes) const {
  part_bytes = std::max<int64_t>(part_bytes, 1024);
  proto::StoreChunk first;
  PartFiller data(part_bytes);
  std::vector<StateExport::Table> tables;  // read as the parts are taken
  // Everything at one instant: no change is half-way through.
  absl::MutexLock lock(&mu_);
  std::vector<const Variable*> vars;
  for (const auto& [name, var] : variables_) vars.push_back(var.get());
  std::sort(vars.begin(), vars.end(),
            [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  // The ledger changes only under mu_ held (pushes, membership), but for
  // its parked pulls, which are not part of the state.
  if (set_up_) {
    proto::CreateVariablesRequest* create = first.mutable_create();
    for (const Variable* var : vars) *create->add_variables() = var->spec;
    *create->mutable_optimizer() = optimizer_config_;
    *create->mutable_sync() = ledger_.config();
  }
  proto::StoreModeState* mode = first.mutable_mode();
  mode->set_generation(generation_);
  ledger_.Export(mode);

  for (const Variable* var : vars) {
    // SYNC: the rows summed for the step in flight, if any (taken before
    // the variable's lock: a RowSync's mutex comes first).
    std::optional<RowAggregate::Saved> row_sums;
    if (RowSync* sync = RowSyncOf(*var, /*make=*/false)) {
      absl::MutexLock sync_lock(&sync->mu);
      if (sync->aggregate.pending() && sync->generation == generation_ &&
          sync->step == var->version.load()) {
        row_sums = sync->aggregate.Export();
      }
    }
    // In a part of their own, after the variable's others.
    auto add_row_sums = [&](int64_t version, int64_t dim) {
      if (!row_sums.has_value()) return;
      const int64_t bytes =
          static_cast<int64_t>(row_sums->ids.size()) * (8 + dim * 4) + 4 * 8;
      proto::VariableChunk* c = data.Room(var->spec.name(), version, bytes, /*new_chunk=*/true);
      c->mutable_row_sum_ids()->Add(row_sums->ids.begin(), row_sums->ids.end());
      AppendFloats(row_sums->sums.data(), static_cast<int64_t>(row_sums->sums.size()),
                   c->mutable_row_sums());
      c->mutable_row_sum_workers()->Add(row_sums->contributors.begin(),
                                        row_sums->contributors.end());
    };
    absl::MutexLock var_lock(&var->mu);  // whole: no striped row push runs
    const int num_slots = var->optimizer.num_slots();
    const std::string& name = var->spec.name();
    const int64_t version = var->version;
    const int64_t dim = std::max<int64_t>(1, var->dim);
    const int64_t float_bytes = static_cast<int64_t>(sizeof(float));
    if (!var->is_hash) {
      const bool accumulating = !var->accum.empty();
      const int64_t row_bytes = dim * float_bytes * (1 + num_slots + (accumulating ? 1 : 0));
      const int64_t rows_per = std::max<int64_t>(1, part_bytes / row_bytes);
      int64_t begin = 0;
      do {
        const int64_t n = std::min(rows_per, var->rows - begin);
        proto::VariableChunk* c = data.Room(name, version, n * row_bytes, /*new_chunk=*/true);
        c->set_row_begin(begin);
        AppendFloats(var->values.data() + begin * dim, n * dim, c->mutable_values());
        for (const std::vector<float>& slot : var->slots) {
          AppendFloats(slot.data() + begin * dim, n * dim, c->add_slots());
        }
        if (accumulating) {
          AppendFloats(var->accum.data() + begin * dim, n * dim, c->mutable_accum());
        }
        if (begin == 0) {
          for (int32_t w : var->contributors) c->add_contributors(w);
        }
        begin += n;
      } while (begin < var->rows);
      add_row_sums(version, dim);
      continue;
    }
    data.Room(name, version, 0, /*new_chunk=*/true);  // the version, with no row held
    const bool bounded = var->table.bounded();
    const int64_t row_bytes = dim * float_bytes * (1 + num_slots) + (bounded ? 24 : 8);
    if (var->table.has_disk() && options_.disk_tier != nullptr) {
      // Rows on disk too: a cut of both tiers, read in parts of its own
      // as the parts are taken (state_export.h), never whole in memory. A
      // ttl table's count would be a scan (with the store, and a resync's
      // order, locked): its bound plans the parts.
      PST_ASSIGN_OR_RETURN(std::unique_ptr<TableCut> cut,
                           var->table.Cut(version, options_.disk_tier));
      const int64_t rows = cut->max_rows();  // the count itself when known
      const bool exact = cut->KnownCount().has_value();
      tables.push_back({name, version, std::move(cut), rows, part_bytes / row_bytes, exact});
    } else {
      PST_RETURN_IF_ERROR(var->table.ForEachRow(
          version, [&](int64_t id, std::span<const float> row,
                       const EvictionIndex::Entry* e) -> absl::Status {
            proto::VariableChunk* c = data.Room(name, version, row_bytes);
            c->add_ids(id);
            AppendFloats(row.data(), static_cast<int64_t>(row.size()), c->mutable_rows());
            if (e != nullptr) {
              c->add_row_last(e->last);
              c->add_row_count(e->count);
            }
            return absl::OkStatus();
          }));
    }
    if (const AdmissionFilter* admission = var->table.admission()) {
      std::string blob = admission->Serialize();
      proto::VariableChunk* c =
          data.Room(name, version, static_cast<int64_t>(blob.size()), /*new_chunk=*/true);
      c->set_admission(std::move(blob));
    }
    add_row_sums(version, dim);
  }
  std::deque<proto::StoreChunk> parts = data.Take();
  parts.push_front(std::move(first));
  return std::make_unique<StateExport>(std::move(parts), std::move(tables));
}

absl::Status VariableStore::LoadState(const proto::StoreChunk& chunk) {
  if (chunk.part() == 0) {
    {
      absl::ReaderMutexLock lock(&mu_);
      if (!variables_.empty()) return BadChunk("part 0 sent to a store that holds variables");
    }
    if (chunk.has_create()) PST_RETURN_IF_ERROR(Create(chunk.create()).status());
    const proto::StoreModeState& mode = chunk.mode();
    absl::MutexLock lock(&mu_);
    PST_RETURN_IF_ERROR(ledger_.Load(mode));
    generation_ = mode.generation();
    return absl::OkStatus();
  }
  absl::ReaderMutexLock lock(&mu_);
  for (const proto::VariableChunk& c : chunk.variables()) {
    PST_ASSIGN_OR_RETURN(Variable * var, Find(c.name()));
    const int num_slots = var->optimizer.num_slots();
    if (c.row_sum_workers_size() > 0) {
      // SYNC: rows summed for the step in flight, in a part of their own
      // (the variable's version came before).
      RowSync& sync = *RowSyncOf(*var);
      absl::MutexLock sync_lock(&sync.mu);
      RowAggregate::Saved saved;
      saved.ids.assign(c.row_sum_ids().begin(), c.row_sum_ids().end());
      saved.sums.resize(c.row_sums().size() / sizeof(float));
      if (saved.sums.size() * sizeof(float) != c.row_sums().size()) {
        return BadChunk(absl::StrCat("row sums of '", c.name(), "' that do not fit it"));
      }
      std::memcpy(saved.sums.data(), c.row_sums().data(), c.row_sums().size());
      saved.contributors.assign(c.row_sum_workers().begin(), c.row_sum_workers().end());
      if (absl::Status s = sync.aggregate.Load(std::move(saved)); !s.ok()) {
        return BadChunk(absl::StrCat("'", c.name(), "': ", s.message()));
      }
      sync.generation = generation_;
      sync.step = c.version();
      continue;
    }
    absl::MutexLock var_lock(&var->mu);
    const int64_t dim = std::max<int64_t>(1, var->dim);
    const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
    if (c.version() < 0) return BadChunk(absl::StrCat("'", c.name(), "' has a negative version"));
    var->version = c.version();
    if (!var->is_hash) {
      const int64_t n = static_cast<int64_t>(c.values().size()) / row_bytes;
      const bool accumulating = !c.accum().empty();
      if (static_cast<int64_t>(c.values().size()) != n * row_bytes || c.row_begin() < 0 ||
          c.row_begin() > var->rows || n > var->rows - c.row_begin() ||
          c.slots_size() != num_slots ||
          (accumulating && static_cast<int64_t>(c.accum().size()) != n * row_bytes)) {
        return BadChunk(absl::StrCat("rows of '", c.name(), "' that do not fit it"));
      }
      for (int s = 0; s < num_slots; ++s) {
        if (static_cast<int64_t>(c.slots(s).size()) != n * row_bytes) {
          return BadChunk(absl::StrCat("a slot of '", c.name(), "' that does not fit it"));
        }
      }
      const size_t at = static_cast<size_t>(c.row_begin() * dim);
      var->PreserveForSnapshotLocked(/*force=*/true);  // a state transfer waits for no writer
      std::memcpy(var->values.data() + at, c.values().data(), c.values().size());
      for (int s = 0; s < num_slots; ++s) {
        std::memcpy(var->slots[s].data() + at, c.slots(s).data(), c.slots(s).size());
      }
      if (accumulating) {
        if (var->accum.empty()) var->accum.assign(var->values.size(), 0.0f);
        std::memcpy(var->accum.data() + at, c.accum().data(), c.accum().size());
      }
      if (c.row_begin() == 0)
        var->contributors.assign(c.contributors().begin(), c.contributors().end());
      continue;
    }
    const int64_t width = dim * (1 + num_slots);
    if (static_cast<int64_t>(c.rows().size()) !=
            c.ids_size() * width * static_cast<int64_t>(sizeof(float)) ||
        c.row_last_size() != c.row_count_size() ||
        (c.row_last_size() != 0 && c.row_last_size() != c.ids_size())) {
      return BadChunk(absl::StrCat("hash rows of '", c.name(), "' that do not fit it"));
    }
    if (var->table.size() + c.ids_size() > options_.max_hash_rows) {
      return absl::ResourceExhaustedError(
          absl::StrCat("'", c.name(), "' would hold more than ", options_.max_hash_rows, " rows"));
    }
    const size_t width_bytes = static_cast<size_t>(width) * sizeof(float);
    for (int i = 0; i < c.ids_size(); ++i) {
      // A row without an index entry (sent by a ps with no bound) counts as
      // updated at the chunk's version.
      EvictionIndex::Entry entry{c.version(), 1.0, 0.0};
      if (c.row_last_size() > 0) entry = {c.row_last(i), c.row_count(i), 0.0};
      var->table.LoadRow(c.ids(i), c.rows().data() + i * width_bytes, entry);
    }
    var->table.FlushEvictions();
    if (!c.admission().empty()) {
      absl::StatusOr<AdmissionFilter> admission = AdmissionFilter::Deserialize(c.admission());
      if (!admission.ok()) {
        return BadChunk(absl::StrCat("the admission counts of '", c.name(),
                                     "': ", admission.status().message()));
      }
      var->table.LoadAdmission(*std::move(admission));
    }
  }
  return absl::OkStatus();
}

}  // namespace pst::ps
