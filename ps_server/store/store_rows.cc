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
  struct RowUpdate {
    Variable* var = nullptr;
    std::vector<int64_t> local;  // local row per id (hash: the id)
    std::vector<float> grad;     // [len(ids), dim]
    std::vector<bool> skip;      // non-finite rows (skip_nonfinite)
  };
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
  // acknowledged and not applied again.
  PST_ASSIGN_OR_RETURN(const bool repeat, ledger_.BeginRowPush(request.worker_index(),
                                                               request.incarnation(),
                                                               request.step()));
  if (repeat) {
    duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  int64_t dropped = 0;
  const int64_t apply_start = absl::GetCurrentTimeNanos();
  for (const RowUpdate& u : updates) {
    response->add_versions(u.var->ApplyRows(*optimizer_, u.local, u.grad, u.skip, &dropped));
  }
  apply_nanos_.fetch_add(absl::GetCurrentTimeNanos() - apply_start, std::memory_order_relaxed);
  response->set_rows_skipped(skipped);
  if (skipped > 0) nonfinite_skipped_.fetch_add(skipped, std::memory_order_relaxed);
  if (dropped > 0) unadmitted_dropped_.fetch_add(dropped, std::memory_order_relaxed);
  pushes_applied_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace pst::ps
