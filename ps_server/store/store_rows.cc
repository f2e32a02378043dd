// VariableStore's row operations (variable_store.h: PullRows, PushRows):
// each request is checked whole here, then every variable reads or updates
// its rows itself (Variable::ReadRows, Variable::ApplyRows).
#include <cmath>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "ps_server/store/variable.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

struct VariableStore::RowUpdate {
  Variable* var = nullptr;
  std::vector<int64_t> local;  // local row per id (hash: the id)
  std::vector<float> grad;     // [len(ids), dim]
  std::vector<bool> skip;      // non-finite rows (skip_nonfinite)
};

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
    PST_RETURN_IF_ERROR(vars[i]->LocalRows(request.rows(i), &local[i]));
  }
  response->Clear();
  std::vector<float> out;
  for (int i = 0; i < request.rows_size(); ++i) {
    const int64_t dim = vars[i]->dim;
    out.resize(local[i].size() * dim);
    const int64_t version = vars[i]->ReadRows(local[i], out.data());
    common::Shape shape;
    shape.Add(static_cast<int64_t>(local[i].size()));
    shape.Add(dim);
    common::PackFloats(out, shape, response->add_values());
    response->add_versions(version);
  }
  return absl::OkStatus();
}

absl::Status VariableStore::PushRows(const proto::PushRowsRequest& request,
                                     proto::PushRowsResponse* response) {
  bool wake = false;
  absl::Status status = PushRowsNoWake(request, response, &wake);
  // A completed SYNC step may be what a parked pull waits for.
  if (wake) WakeWaiters();
  return status;
}

absl::Status VariableStore::PushRowsNoWake(const proto::PushRowsRequest& request,
                                           proto::PushRowsResponse* response, bool* wake) {
  if (request.rows_size() != request.gradients_size()) {
    return absl::InvalidArgumentError(absl::StrCat("push has ", request.rows_size(),
                                                   " row lists but ", request.gradients_size(),
                                                   " gradients"));
  }
  PST_RETURN_IF_ERROR(CheckIdCount(request.rows(), "PushRows"));
  PST_RETURN_IF_ERROR(CheckCounter(request.step(), "step"));
  absl::ReaderMutexLock lock(&mu_);
  if (!set_up_) {
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
    PST_RETURN_IF_ERROR(u.var->LocalRows(ids, &u.local));
    if (u.var->is_hash) PST_RETURN_IF_ERROR(u.var->CheckRoom(u.local));
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
  // A repeat of an applied row push (worker, incarnation, step) is
  // acknowledged and not applied again (SYNC: recognized per step by the
  // aggregates instead).
  proto::SyncMode mode = proto::ASYNC;
  PST_ASSIGN_OR_RETURN(const bool repeat, ledger_.BeginRowPush(request.worker_index(),
                                                               request.incarnation(),
                                                               request.step(), &mode));
  if (mode == proto::SYNC) {
    response->set_rows_skipped(skipped);
    if (skipped > 0) nonfinite_skipped_.fetch_add(skipped, std::memory_order_relaxed);
    return PushRowsSync(request, updates, response, wake);
  }
  if (repeat) {
    duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  int64_t dropped = 0;
  const int64_t apply_start = absl::GetCurrentTimeNanos();
  for (const RowUpdate& u : updates) {
    response->add_versions(u.var->ApplyRows(u.local, u.grad, u.skip, &dropped));
  }
  apply_nanos_.fetch_add(absl::GetCurrentTimeNanos() - apply_start, std::memory_order_relaxed);
  response->set_rows_skipped(skipped);
  if (skipped > 0) nonfinite_skipped_.fetch_add(skipped, std::memory_order_relaxed);
  if (dropped > 0) unadmitted_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

VariableStore::RowSync* VariableStore::RowSyncOf(const Variable& var, bool make) const {
  absl::MutexLock lock(&row_sync_mu_);
  if (!make) {
    auto it = row_sync_.find(var.spec.name());
    return it == row_sync_.end() ? nullptr : it->second.get();
  }
  std::unique_ptr<RowSync>& sync = row_sync_[var.spec.name()];
  if (sync == nullptr) sync = std::make_unique<RowSync>(var.dim);
  return sync.get();
}

void VariableStore::RefreshRowSyncLocked(RowSync& sync, const Variable& var) const {
  const int64_t version = var.version.load();
  if (sync.generation == generation_ && sync.step == version) return;
  if (sync.aggregate.pending()) sync.aggregate.TakeMean();  // dropped
  sync.generation = generation_;
  sync.step = version;
}

bool VariableStore::MaybeApplyRowSyncLocked(RowSync& sync, Variable& var, int quorum,
                                            int64_t* dropped) {
  if (!sync.aggregate.Ready(quorum)) return false;
  RowAggregate::Mean mean = sync.aggregate.TakeMean();
  const std::vector<bool> keep(mean.ids.size(), false);
  // One row push per step: the version moves on by one, to step + 1.
  sync.step = var.ApplyRows(mean.ids, mean.grad, keep, dropped);
  return true;
}

absl::Status VariableStore::PushRowsSync(const proto::PushRowsRequest& request,
                                         const std::vector<RowUpdate>& updates,
                                         proto::PushRowsResponse* response, bool* applied) {
  *applied = false;
  const int64_t step = request.step();
  // A gradient for a step not reached yet cannot be right: refused before
  // anything is summed (versions only grow, so no later check can fail).
  for (const RowUpdate& u : updates) {
    if (step > u.var->version.load()) {
      return absl::AbortedError(absl::StrCat("row push for step ", step, " but '",
                                             u.var->spec.name(), "' is at version ",
                                             u.var->version.load(), "; pull before pushing"));
    }
  }
  bool added = false, stale = false, duplicate = false;
  int64_t dropped = 0;
  const int64_t apply_start = absl::GetCurrentTimeNanos();
  for (const RowUpdate& u : updates) {
    RowSync& sync = *RowSyncOf(*u.var);
    absl::MutexLock sync_lock(&sync.mu);
    RefreshRowSyncLocked(sync, *u.var);
    switch (sync.aggregate.AddPush(sync.step, step, request.worker_index(), u.local, u.grad,
                                   u.skip)) {
      case RowAggregate::Add::kAdded:
        added = true;
        *applied |= MaybeApplyRowSyncLocked(sync, *u.var, ledger_.quorum(), &dropped);
        break;
      case RowAggregate::Add::kStale:
        stale = true;
        break;
      case RowAggregate::Add::kDuplicate:
        duplicate = true;
        break;
      case RowAggregate::Add::kAhead:  // checked above; versions only grow
        break;
    }
    response->add_versions(u.var->version.load());
  }
  apply_nanos_.fetch_add(absl::GetCurrentTimeNanos() - apply_start, std::memory_order_relaxed);
  if (dropped > 0) unadmitted_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  if (added) pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  if (stale && !added) stale_dropped_.fetch_add(1, std::memory_order_relaxed);
  if (duplicate && !added) duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace pst::ps
