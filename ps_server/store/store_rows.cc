// VariableStore's row operations (variable_store.h: PullRows, PushRows):
// id checks and routing, hash rows made on first touch after admission,
// and row updates under striped locks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "ps_server/store/store_internal.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

using store_internal::HashPartitionOf;
using store_internal::kHashRowSpace;
using store_internal::LogicalName;
using store_internal::MixId;

template <typename Fn>
void VariableStore::ForEachRowByStripe(const Variable& var, const std::vector<int64_t>& local,
                                       bool write, Fn fn) {
  // Counting sort by stripe, so each stripe is locked once per call.
  std::array<int32_t, kRowStripes + 1> start{};
  std::vector<int32_t> stripe_of(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    stripe_of[i] = var.StripeOf(local[i]);
    ++start[stripe_of[i] + 1];
  }
  for (int s = 0; s < kRowStripes; ++s) start[s + 1] += start[s];
  std::array<int32_t, kRowStripes> next;
  std::copy_n(start.begin(), kRowStripes, next.begin());
  std::vector<int32_t> order(local.size());
  for (size_t i = 0; i < local.size(); ++i) order[next[stripe_of[i]]++] = static_cast<int32_t>(i);
  for (int s = 0; s < kRowStripes; ++s) {
    if (start[s] == start[s + 1]) continue;
    absl::Mutex& stripe = var.stripes[s];
    if (write) {
      stripe.Lock();
    } else {
      stripe.ReaderLock();
    }
    for (int32_t k = start[s]; k < start[s + 1]; ++k) fn(order[k]);
    if (write) {
      stripe.Unlock();
    } else {
      stripe.ReaderUnlock();
    }
  }
}

absl::Status VariableStore::CheckRowIds(const Variable& var, const proto::RowIds& ids,
                                        std::vector<int64_t>* local) {
  const proto::VariableSpec& spec = var.spec;
  const std::string& name = spec.name();
  local->resize(ids.ids_size());
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.ids_size());
  const int64_t p = spec.partition(), np = spec.num_partitions();
  for (int i = 0; i < ids.ids_size(); ++i) {
    const int64_t id = ids.ids(i);
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " appears more than once in the ids for '", name, "'"));
    }
    switch (spec.routing()) {
      case proto::ROUTING_NONE:
        if (id < 0 || id >= var.rows) {
          return absl::InvalidArgumentError(absl::StrCat("id ", id,
                                                         " is out of range for variable '", name,
                                                         "' (valid ids: [0, ", var.rows, "))"));
        }
        (*local)[i] = id;
        break;
      case proto::MOD:
      case proto::DIV: {
        const int64_t n = spec.full_shape(0);
        if (id < 0 || id >= n) {
          return absl::InvalidArgumentError(
              absl::StrCat("id ", id, " is out of range for variable '", LogicalName(spec),
                           "' (valid ids: [0, ", n, "); sent to its partition '", name, "')"));
        }
        if (spec.routing() == proto::MOD) {
          if (id % np != p) {
            return absl::InvalidArgumentError(absl::StrCat(
                "id ", id, " belongs to partition ", id % np, " of variable '", LogicalName(spec),
                "' (MOD: id % ", np, "), not to '", name, "' (partition ", p, ")"));
          }
          (*local)[i] = id / np;
        } else {
          const int64_t lo = spec.row_offset(), hi = lo + var.rows;
          if (id < lo || id >= hi) {
            return absl::InvalidArgumentError(absl::StrCat(
                "id ", id, " is not in '", name, "': DIV partition ", p, " of ", np,
                " of variable '", LogicalName(spec), "' holds ids [", lo, ", ", hi, ")"));
          }
          (*local)[i] = id - lo;
        }
        break;
      }
      case proto::HASH: {
        const int q = HashPartitionOf(id, static_cast<int>(np));
        if (q != p) {
          return absl::InvalidArgumentError(absl::StrCat(
              "id ", id, " belongs to partition ", q, " of hash variable '", LogicalName(spec),
              "' (uint64(id) % ", np, "), not to '", name, "' (partition ", p, ")"));
        }
        (*local)[i] = id;
        break;
      }
      default:
        return absl::InternalError(absl::StrCat("variable '", name, "' has an unknown routing"));
    }
  }
  return absl::OkStatus();
}

bool VariableStore::CountTouch(Variable& var, int64_t id, bool admit) const {
  const int32_t admit_after = var.spec.admit_after();
  if (admit_after <= 1) return true;
  int64_t count;
  auto pending = var.pending.find(id);
  uint32_t* shared = nullptr;
  if (pending == var.pending.end() && !var.overflow_counts.empty()) {
    // An id once counted in the shared counters keeps counting there
    // (they never decrease), even after the exact map has room again.
    shared = &var.overflow_counts[MixId(id) % var.overflow_counts.size()];
    if (*shared == 0) shared = nullptr;
  }
  if (pending != var.pending.end()) {
    count = ++pending->second;
  } else if (shared == nullptr &&
             static_cast<int64_t>(var.pending.size()) < options_.max_pending_ids) {
    var.pending.emplace(id, 1);
    count = 1;
  } else {
    // The exact map is full: count in shared, saturating counters.
    if (var.overflow_counts.empty()) {
      var.overflow_counts.assign(std::max<int64_t>(1, options_.admission_overflow_counters), 0);
    }
    uint32_t& c = var.overflow_counts[MixId(id) % var.overflow_counts.size()];
    if (c < std::numeric_limits<uint32_t>::max()) ++c;
    count = c;
  }
  if (count < admit_after) return false;
  // A read leaves an admitted id counted, so that the push that makes its
  // row finds it admitted.
  if (admit) var.pending.erase(id);
  return true;
}

void VariableStore::InitialHashRow(const Variable& var, int64_t id, float* out) const {
  const uint64_t first =
      (static_cast<uint64_t>(id) & (kHashRowSpace - 1)) * static_cast<uint64_t>(var.dim);
  common::FillInitialValues(var.fill_spec, static_cast<int64_t>(first),
                            std::span<float>(out, var.dim));
}

float* VariableStore::TouchHashRow(Variable& var, int64_t id) const {
  auto it = var.hash_rows.find(id);
  if (it != var.hash_rows.end()) return it->second.data();
  if (!CountTouch(var, id, /*admit=*/true)) return nullptr;
  const int64_t dim = var.dim;
  const int num_slots = optimizer_->num_slots();
  std::vector<float> row(dim * (1 + num_slots));
  InitialHashRow(var, id, row.data());
  for (int s = 0; s < num_slots; ++s) {
    std::fill_n(row.data() + (s + 1) * dim, dim, optimizer_->SlotInitialValue(s));
  }
  float* data = var.hash_rows.emplace(id, std::move(row)).first->second.data();
  var.num_hash_rows.fetch_add(1, std::memory_order_relaxed);
  return data;
}

absl::Status VariableStore::CheckHashRoom(const Variable& var,
                                          const std::vector<int64_t>& ids) const {
  int64_t fresh = 0;
  {
    absl::ReaderMutexLock var_lock(&var.mu);
    for (int64_t id : ids) fresh += var.hash_rows.contains(id) ? 0 : 1;
  }
  const int64_t held = var.num_hash_rows.load(std::memory_order_relaxed);
  if (fresh > 0 && held + fresh > options_.max_hash_rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hash embedding '", var.spec.name(), "' holds ", held, " rows and this push would add up to ",
        fresh, "; this ps keeps at most ", options_.max_hash_rows,
        " rows per table (--max_table_rows); nothing applied"));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::CheckIdCount(
    const google::protobuf::RepeatedPtrField<proto::RowIds>& rows, absl::string_view op) const {
  int64_t ids = 0;
  for (const proto::RowIds& r : rows) ids += r.ids_size();
  if (ids > options_.max_ids_per_request) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " lists ", ids, " ids; this ps takes at most ", options_.max_ids_per_request,
        " per request (--max_ids_per_request): split the request"));
  }
  return absl::OkStatus();
}

bool VariableStore::Holds(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  return variables_.contains(name);
}

bool VariableStore::PullMayChangeRows(const proto::PullRowsRequest& request) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const proto::RowIds& rows : request.rows()) {
    absl::StatusOr<Variable*> var = Find(rows.name());
    if (var.ok() && (*var)->is_hash) return true;
  }
  return false;
}

absl::Status VariableStore::PullRows(const proto::PullRowsRequest& request,
                                     proto::PullRowsResponse* response) const {
  PST_RETURN_IF_ERROR(CheckIdCount(request.rows(), "PullRows"));
  absl::ReaderMutexLock lock(&mu_);
  // Validate everything first.
  std::vector<Variable*> vars(request.rows_size());
  std::vector<std::vector<int64_t>> local(request.rows_size());
  int64_t answer_bytes = 0;
  for (int i = 0; i < request.rows_size(); ++i) {
    PST_ASSIGN_OR_RETURN(vars[i], Find(request.rows(i).name()));
    answer_bytes += request.rows(i).ids_size() * vars[i]->dim * static_cast<int64_t>(sizeof(float));
    if (answer_bytes > options_.max_response_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "PullRows of these rows would answer with more than ", options_.max_response_bytes,
          " bytes, the message limit: pull fewer rows per request"));
    }
    PST_RETURN_IF_ERROR(CheckRowIds(*vars[i], request.rows(i), &local[i]));
  }
  response->Clear();
  std::vector<float> out;
  for (int i = 0; i < request.rows_size(); ++i) {
    Variable& var = *vars[i];
    const int64_t dim = var.dim;
    const std::vector<int64_t>& rows = local[i];
    out.assign(rows.size() * dim, 0.0f);
    int64_t version;
    bool done = false;
    {
      absl::ReaderMutexLock var_lock(&var.mu);
      // The hash map itself only changes under var.mu held exclusively.
      auto source = [&](size_t r) -> const float* {
        return var.is_hash ? var.hash_rows.find(rows[r])->second.data()
                           : var.values.data() + rows[r] * dim;
      };
      if (!var.is_hash || std::all_of(rows.begin(), rows.end(),
                                      [&](int64_t id) { return var.hash_rows.contains(id); })) {
        if (var.row_pushes_striped) {
          ForEachRowByStripe(var, rows, /*write=*/false,
                             [&](size_t r) { std::copy_n(source(r), dim, out.data() + r * dim); });
        } else {
          for (size_t r = 0; r < rows.size(); ++r) {
            std::copy_n(source(r), dim, out.data() + r * dim);
          }
        }
        done = true;
      }
      version = var.version;
    }
    if (!done) {
      // Some rows are not stored. A read stores none: an unseen id reads as
      // its initial values (zeros while admission has not admitted it, and
      // the read counts as a touch); its row is made by the first push.
      absl::MutexLock var_lock(&var.mu);
      for (size_t r = 0; r < rows.size(); ++r) {
        auto it = var.hash_rows.find(rows[r]);
        if (it != var.hash_rows.end()) {
          std::copy_n(it->second.data(), dim, out.data() + r * dim);
        } else if (CountTouch(var, rows[r], /*admit=*/false)) {
          InitialHashRow(var, rows[r], out.data() + r * dim);
        }
      }
      version = var.version;
    }
    common::Shape shape;
    shape.Add(static_cast<int64_t>(rows.size()));
    shape.Add(dim);
    common::PackFloats(out, shape, response->add_values());
    response->add_versions(version);
  }
  return absl::OkStatus();
}

absl::Status VariableStore::PushRows(const proto::PushRowsRequest& request,
                                     proto::PushRowsResponse* response) {
  if (request.rows_size() != request.gradients_size()) {
    return absl::InvalidArgumentError(absl::StrCat("push has ", request.rows_size(),
                                                   " row lists but ", request.gradients_size(),
                                                   " gradients"));
  }
  PST_RETURN_IF_ERROR(CheckIdCount(request.rows(), "PushRows"));
  PST_RETURN_IF_ERROR(CheckCounter(request.step(), "step"));
  absl::ReaderMutexLock lock(&mu_);
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("no variables have been created on this ps yet");
  }
  PST_RETURN_IF_ERROR(CheckGeneration(request.generation()));
  const bool skip_nonfinite = optimizer_config_.skip_nonfinite();
  // Validate every gradient before touching any variable.
  absl::flat_hash_set<std::string_view> seen;
  std::vector<RowUpdate> updates(request.rows_size());
  int64_t skipped = 0;
  for (int i = 0; i < request.rows_size(); ++i) {
    const proto::RowIds& ids = request.rows(i);
    const std::string& name = ids.name();
    RowUpdate& u = updates[i];
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' appears twice in one push"));
    }
    PST_ASSIGN_OR_RETURN(u.var, Find(name));
    PST_RETURN_IF_ERROR(CheckRowIds(*u.var, ids, &u.local));
    if (u.var->is_hash) PST_RETURN_IF_ERROR(CheckHashRoom(*u.var, u.local));
    const int64_t n = ids.ids_size(), dim = u.var->dim;
    common::Shape shape;
    shape.Add(n);
    shape.Add(dim);
    PST_RETURN_IF_ERROR(
        common::CheckTensorMatches(request.gradients(i), shape,
                                   absl::StrCat("gradient for the ", n, " rows of '", name, "'")));
    u.grad.resize(n * dim);
    common::UnpackFloats(request.gradients(i), u.grad);
    u.skip.assign(n, false);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < dim; ++j) {
        const float g = u.grad[r * dim + j];
        if (std::isfinite(g)) continue;
        if (!skip_nonfinite) {
          return absl::InvalidArgumentError(absl::StrCat(
              "gradient for '", name, "' has a ", std::isnan(g) ? "NaN" : "Inf", " at row ", r,
              " (id ", ids.ids(r), "), element ", j, "; nothing applied"));
        }
        u.skip[r] = true;
        ++skipped;
        break;
      }
    }
  }
  response->Clear();
  {
    // A repeat of an applied row push (worker, incarnation, step) is
    // acknowledged and not applied again.
    absl::MutexLock wait_lock(&wait_mu_);
    PST_RETURN_IF_ERROR(CheckWorkerLocked(request.worker_index(), /*allow_none=*/false));
    if (request.incarnation() != 0) {
      PushKey& key = last_push_[{request.worker_index(), 0}];
      if (key.incarnation != request.incarnation()) key = PushKey{request.incarnation(), -1, -1};
      if (request.step() <= key.rows_step) {
        duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
        return absl::OkStatus();
      }
      key.rows_step = request.step();
    }
  }
  int64_t dropped = 0;
  const int num_slots = optimizer_->num_slots();
  std::vector<std::span<float>> slots(num_slots);
  const int64_t apply_start = absl::GetCurrentTimeNanos();
  for (RowUpdate& u : updates) {
    if (TryApplyRowsShared(u, response)) continue;
    Variable& var = *u.var;
    const int64_t dim = var.dim;
    absl::MutexLock var_lock(&var.mu);
    var.row_pushes_striped = true;
    const int64_t t = var.version + 1;
    for (size_t r = 0; r < u.local.size(); ++r) {
      if (u.skip[r]) continue;
      float* row;
      if (var.is_hash) {
        row = TouchHashRow(var, u.local[r]);
        if (row == nullptr) {
          ++dropped;
          continue;
        }
        for (int s = 0; s < num_slots; ++s)
          slots[s] = {row + (s + 1) * dim, static_cast<size_t>(dim)};
      } else {
        const int64_t offset = u.local[r] * dim;
        row = var.values.data() + offset;
        for (int s = 0; s < num_slots; ++s)
          slots[s] = {var.slots[s].data() + offset, static_cast<size_t>(dim)};
      }
      optimizer_->ApplyDense(std::span<float>(row, dim),
                             std::span<const float>(u.grad.data() + r * dim, dim), slots, t);
    }
    var.version = t;
    response->add_versions(t);
  }
  apply_nanos_.fetch_add(absl::GetCurrentTimeNanos() - apply_start, std::memory_order_relaxed);
  response->set_rows_skipped(skipped);
  if (skipped > 0) nonfinite_skipped_.fetch_add(skipped, std::memory_order_relaxed);
  if (dropped > 0) unadmitted_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

bool VariableStore::TryApplyRowsShared(const RowUpdate& u, proto::PushRowsResponse* response) {
  Variable& var = *u.var;
  absl::ReaderMutexLock var_lock(&var.mu);
  if (!var.row_pushes_striped) return false;
  if (var.is_hash && !std::all_of(u.local.begin(), u.local.end(),
                                  [&](int64_t id) { return var.hash_rows.contains(id); })) {
    return false;
  }
  const int64_t dim = var.dim;
  const int num_slots = optimizer_->num_slots();
  // Adam's t: every push gets its own count, whatever order rows land in.
  const int64_t t = var.version.fetch_add(1) + 1;
  std::vector<std::span<float>> slots(num_slots);
  ForEachRowByStripe(var, u.local, /*write=*/true, [&](size_t r) {
    if (u.skip[r]) return;
    float* row;
    if (var.is_hash) {
      row = var.hash_rows.find(u.local[r])->second.data();
      for (int s = 0; s < num_slots; ++s)
        slots[s] = {row + (s + 1) * dim, static_cast<size_t>(dim)};
    } else {
      const int64_t offset = u.local[r] * dim;
      row = var.values.data() + offset;
      for (int s = 0; s < num_slots; ++s) {
        slots[s] = {var.slots[s].data() + offset, static_cast<size_t>(dim)};
      }
    }
    optimizer_->ApplyDense(std::span<float>(row, dim),
                           std::span<const float>(u.grad.data() + r * dim, dim), slots, t);
  });
  response->add_versions(t);
  return true;
}

}  // namespace pst::ps
