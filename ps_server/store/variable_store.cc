// VariableStore's data plane: Create, Pull, Push (dense), PullRows and
// PushRows, the waits of SYNC and SSP, and the figures. A request is
// checked whole here; each Variable then applies its part under its own
// locks, and the SyncLedger keeps the mode's books.
#include "ps_server/store/variable_store.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/initializer.h"
#include "common/sparse_gradient.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "ps_server/store/spec_checks.h"
#include "ps_server/store/store_internal.h"
#include "ps_server/store/variable.h"

namespace pst::ps {
namespace {

using store_internal::LogicalName;

using google::protobuf::util::MessageDifferencer;

static_assert(VariableStore::kRowStripes == Variable::kRowStripes);

absl::Status HashNeedsRowOps(const std::string& name, absl::string_view op) {
  return absl::FailedPreconditionError(
      absl::StrCat("variable '", name, "' is a hash embedding (rows made on first touch) and has ",
                   "no dense form; use ", op));
}

}  // namespace

VariableStore::VariableStore(Options options)
    : options_(options), ledger_(options.max_workers, options.max_parked_pulls) {}

VariableStore::~VariableStore() = default;

absl::StatusOr<int> VariableStore::Create(const proto::CreateVariablesRequest& request) {
  // Every optimizer the request names, built (and so checked) first: the
  // job's, and each variable's own (its group's).
  absl::flat_hash_map<std::string, std::unique_ptr<Optimizer>> built;
  std::vector<std::string> key_of(request.variables_size());
  for (int i = -1; i < request.variables_size(); ++i) {
    const proto::OptimizerConfig& config = i < 0 || !request.variables(i).has_optimizer()
                                               ? request.optimizer()
                                               : request.variables(i).optimizer();
    absl::StatusOr<proto::OptimizerConfig> checked = common::CheckOptimizerConfig(config);
    if (!checked.ok()) {
      return i < 0 ? checked.status()
                   : absl::InvalidArgumentError(absl::StrCat("variable '",
                                                             request.variables(i).name(),
                                                             "': ", checked.status().message()));
    }
    const std::string key = checked->SerializeAsString();
    if (i >= 0) key_of[i] = key;
    if (!built.contains(key)) {
      PST_ASSIGN_OR_RETURN(built[key], CreateOptimizer(*checked));
    }
  }

  absl::MutexLock lock(&mu_);
  if (set_up_ && !MessageDifferencer::Equals(optimizer_config_, request.optimizer())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this ps already runs optimizer '", optimizer_config_.name(), "' (learning_rate ",
        optimizer_config_.learning_rate(), "); it cannot change to '", request.optimizer().name(),
        "' (learning_rate ", request.optimizer().learning_rate(), ")"));
  }
  // The training mode: set by the first Create, the same ever after.
  PST_RETURN_IF_ERROR(ledger_.CheckConfig(request.sync()));
  // Check everything before creating anything.
  if (request.initial_values_size() != 0 &&
      request.initial_values_size() != request.variables_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial_values has ", request.initial_values_size(), " entries for ",
                     request.variables_size(), " variables (need none, or one each)"));
  }
  absl::flat_hash_set<std::string_view> seen;
  std::vector<const proto::VariableSpec*> to_create;
  std::vector<const std::string*> optimizer_of;    // per to_create: its key in `built`
  std::vector<const std::string*> initial_values;  // per to_create; null: the initializer
  for (int i = 0; i < request.variables_size(); ++i) {
    const proto::VariableSpec& spec = request.variables(i);
    PST_RETURN_IF_ERROR(ValidateSpec(spec, options_.max_variable_elements));
    PST_RETURN_IF_ERROR(common::ValidateInitializer(spec));
    if (!seen.insert(spec.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", spec.name(), "' appears twice in one request"));
    }
    const std::string* values =
        request.initial_values_size() > 0 && !request.initial_values(i).empty()
            ? &request.initial_values(i)
            : nullptr;
    if (values != nullptr) PST_RETURN_IF_ERROR(CheckInitialValues(spec, *values));
    auto it = variables_.find(spec.name());
    if (it == variables_.end()) {
      to_create.push_back(&spec);
      optimizer_of.push_back(&key_of[i]);
      initial_values.push_back(values);
    } else if (!MessageDifferencer::Equals(it->second->spec, spec)) {
      return absl::AlreadyExistsError(
          absl::StrCat("variable '", spec.name(), "' already exists with shape ",
                       common::ShapeString(it->second->spec.shape()),
                       " and another spec; asked for shape ", common::ShapeString(spec.shape())));
    }
  }
  // The memory the new variables take, checked before any is allocated.
  int64_t new_bytes = 0;
  for (size_t k = 0; k < to_create.size(); ++k) {
    const proto::VariableSpec* spec = to_create[k];
    if (spec->routing() == proto::HASH) continue;  // bounded by max_hash_rows
    absl::StatusOr<int64_t> elements = common::NumElements(spec->shape());
    if (!elements.ok()) return elements.status();
    const int64_t bytes = *elements * static_cast<int64_t>(sizeof(float)) *
                          (1 + built.at(*optimizer_of[k])->num_slots());
    new_bytes += bytes;
    if (new_bytes > options_.max_store_bytes - store_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "creating these variables would take this ps to ", store_bytes_ + new_bytes,
          " bytes of variables and optimizer slots (at '", spec->name(), "'); it holds at most ",
          options_.max_store_bytes, " (--max_variable_bytes); nothing was created"));
    }
  }
  // Allocate and initialize outside the map, then publish all at once.
  HashRowTable::Limits limits;
  limits.admission_filter_bytes = options_.admission_filter_bytes;
  limits.max_rows = options_.max_hash_rows;
  // The optimizers this store runs: one per distinct setting, kept.
  for (auto& [key, optimizer] : built) {
    if (!optimizers_.contains(key)) optimizers_[key] = std::move(optimizer);
  }
  std::vector<std::unique_ptr<Variable>> created;
  for (size_t k = 0; k < to_create.size(); ++k) {
    Optimizer& optimizer = *optimizers_.at(*optimizer_of[k]);
    created.push_back(
        std::make_unique<Variable>(*to_create[k], optimizer, limits, initial_values[k]));
    Variable& var = *created.back();
    if (var.is_hash && options_.disk_tier != nullptr) {
      absl::MutexLock var_lock(&var.mu);  // not shared yet
      PST_RETURN_IF_ERROR(var.table.UseDisk(options_.disk_tier.get(), var.spec.name()));
    }
  }
  for (auto& var : created) {
    std::string name = var->spec.name();
    variables_.emplace(std::move(name), std::move(var));
  }
  store_bytes_ += new_bytes;
  if (!set_up_) {
    set_up_ = true;
    optimizer_config_ = request.optimizer();
  }
  ledger_.SetConfigOnce(request.sync());
  return static_cast<int>(created.size());
}

absl::StatusOr<Variable*> VariableStore::Find(const std::string& name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("no variable named '", name, "' on this ps"));
  }
  return it->second.get();
}

bool VariableStore::Holds(const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  return variables_.contains(name);
}

absl::Status VariableStore::Pull(const google::protobuf::RepeatedPtrField<std::string>& names,
                                 proto::PullResponse* response, proto::DType dtype) const {
  PST_RETURN_IF_ERROR(common::CheckWireDtype(dtype, "pull's wire_dtype", /*unset_ok=*/true));
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const Variable*> vars;
  if (names.empty()) {
    for (const auto& [name, var] : variables_) {
      if (!var->is_hash) vars.push_back(var.get());
    }
    std::sort(vars.begin(), vars.end(),
              [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  } else {
    absl::flat_hash_set<std::string_view> seen;
    for (const std::string& name : names) {
      if (!seen.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("pull names variable '", name, "' more than once"));
      }
      PST_ASSIGN_OR_RETURN(const Variable* var, Find(name));
      if (var->is_hash) return HashNeedsRowOps(name, "PullRows");
      vars.push_back(var);
    }
  }
  int64_t answer_bytes = 0;
  for (const Variable* var : vars) {
    answer_bytes += var->rows * var->dim *
                    static_cast<int64_t>(common::WireElementBytes(common::AnswerDtype(dtype)));
    if (answer_bytes > options_.max_response_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this pull would answer with more than ", options_.max_response_bytes,
          " bytes, the message limit: pull fewer variables per request"));
    }
  }
  response->Clear();
  for (const Variable* var : vars) {
    WholeReadLock var_lock(*var);
    response->add_names(var->spec.name());
    var->PackValuesLocked(response->add_values(), dtype);
    response->add_versions(var->version);
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Push(const proto::PushRequest& request, proto::PushResponse* response,
                                 const Payloads* payloads) {
  absl::Status status = PushNoWake(request, response, payloads);
  if (status.ok()) WakeWaiters();
  return status;
}

absl::Status VariableStore::PushNoWake(const proto::PushRequest& request,
                                       proto::PushResponse* response, const Payloads* payloads,
                                       proto::PullResponse* answer) {
  if (request.names_size() != request.gradients_size()) {
    return absl::InvalidArgumentError(absl::StrCat("push has ", request.names_size(), " names but ",
                                                   request.gradients_size(), " gradients"));
  }
  if (payloads != nullptr && static_cast<int>(payloads->size()) != request.gradients_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push has ", request.gradients_size(), " gradients but ", payloads->size(), " payloads"));
  }
  PST_RETURN_IF_ERROR(CheckCounter(request.step(), "step"));
  // -1 (or below): no position; else a batch count, kept as position + 1.
  if (request.position() >= 0) PST_RETURN_IF_ERROR(CheckCounter(request.position(), "position"));
  PST_RETURN_IF_ERROR(
      common::CheckWireDtype(request.wire_dtype(), "push's wire_dtype", /*unset_ok=*/true));
  // Gradient i's data: its pieces in gRPC's receive buffer, or the tensor's
  // own bytes.
  std::vector<std::string_view> whole(payloads == nullptr ? request.gradients_size() : 0);
  std::vector<common::PayloadParts> payload(request.gradients_size());
  for (int i = 0; i < request.gradients_size(); ++i) {
    if (payloads != nullptr) {
      payload[i] = (*payloads)[i];
    } else {
      whole[i] = request.gradients(i).data();
      payload[i] = common::PayloadParts(&whole[i], 1);
    }
  }
  absl::ReaderMutexLock lock(&mu_);
  if (!set_up_) {
    return absl::FailedPreconditionError("no variables have been created on this ps yet");
  }
  PST_RETURN_IF_ERROR(CheckGeneration(request.generation()));
  const bool skip_nonfinite = optimizer_config_.skip_nonfinite();
  // Validate every gradient before touching any variable.
  absl::flat_hash_set<std::string_view> seen;
  std::vector<Variable*> vars;
  // A gradient with a non-finite value is unpacked into grads[i] and
  // handled row by row; the rest (nearly all) are used from the request's
  // payload as they are, with no copy.
  std::vector<std::vector<float>> grads(request.names_size());
  std::vector<std::vector<bool>> skip(request.names_size());
  int64_t skipped = 0;
  for (int i = 0; i < request.names_size(); ++i) {
    const std::string& name = request.names(i);
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' appears twice in one push"));
    }
    PST_ASSIGN_OR_RETURN(Variable * var, Find(name));
    if (var->is_hash) return HashNeedsRowOps(name, "PushRows");
    PST_RETURN_IF_ERROR(
        common::CheckTensorMatches(request.gradients(i), common::PayloadBytes(payload[i]),
                                   var->spec.shape(), absl::StrCat("gradient for '", name, "'")));
    vars.push_back(var);
    const proto::DType dtype = request.gradients(i).dtype();
    if (dtype == proto::DT_SPARSE_FLOAT32) {
      // Top-k entries: the dense gradient they stand for, zeros elsewhere.
      grads[i].resize(static_cast<size_t>(var->rows * var->dim));
      if (absl::Status expanded = common::ExpandSparseGradient(payload[i], grads[i]);
          !expanded.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("gradient for '", name, "': ", expanded.message()));
      }
    } else {
      if (common::AllFinite(payload[i], dtype)) continue;
      grads[i].resize(common::PayloadBytes(payload[i]) / common::WireElementBytes(dtype));
      common::CopyPayload(payload[i], dtype, grads[i]);
    }
    for (size_t k = 0; k < grads[i].size(); ++k) {
      if (std::isfinite(grads[i][k])) continue;
      if (!skip_nonfinite) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for '", name, "' has a ",
                                                       std::isnan(grads[i][k]) ? "NaN" : "Inf",
                                                       " at element ", k, "; nothing applied"));
      }
      // Skip the whole row (slice along axis 0) holding it, then go on with
      // the next row.
      if (skip[i].empty()) skip[i].assign(var->rows, false);
      const int64_t row = static_cast<int64_t>(k) / var->dim;
      skip[i][row] = true;
      ++skipped;
      k = (row + 1) * var->dim - 1;
    }
  }
  response->Clear();
  const int32_t worker = request.worker_index();
  bool repeat = false;
  PST_ASSIGN_OR_RETURN(const proto::SyncMode mode,
                       ledger_.BeginDensePush(worker, request.part(), request.incarnation(),
                                              request.step(), &repeat));
  if (repeat) {
    duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
    response->set_duplicate(true);
    return absl::OkStatus();
  }
  if (mode == proto::SYNC) {
    // A gradient for a version not reached yet cannot be right.
    for (Variable* var : vars) {
      absl::ReaderMutexLock var_lock(&var->mu);
      if (request.step() > var->version) {
        return absl::AbortedError(absl::StrCat("push for step ", request.step(), " but '",
                                               var->spec.name(), "' is at version ",
                                               var->version.load(), "; pull before pushing"));
      }
    }
  }
  bool applied = false, stale = false, duplicate = false;
  int64_t staleness = 0;
  if (mode != proto::ASYNC) answer = nullptr;
  const int64_t apply_start = absl::GetCurrentTimeNanos();
  for (size_t i = 0; i < vars.size(); ++i) {
    Variable& var = *vars[i];
    absl::MutexLock var_lock(&var.mu);
    if (mode == proto::SYNC) {
      switch (var.AddToAggregateLocked(request.step(), worker, payload[i],
                                       request.gradients(i).dtype(), grads[i], skip[i],
                                       ledger_.quorum())) {
        case Variable::SyncAdd::kStale:
          stale = true;
          break;
        case Variable::SyncAdd::kDuplicate:
          duplicate = true;
          break;
        case Variable::SyncAdd::kAdded:
          applied = true;
          break;
      }
    } else {
      staleness = std::max<int64_t>(staleness, var.version - request.base_version());
      proto::Tensor* value = nullptr;
      if (answer != nullptr) {
        answer->add_names(var.spec.name());
        value = answer->add_values();
      }
      if (grads[i].empty()) {
        var.ApplyPayloadLocked(payload[i], request.gradients(i).dtype(), value,
                               request.wire_dtype());
      } else {
        var.ApplyLocked(grads[i], skip[i]);
        if (value != nullptr) var.PackValuesLocked(value, request.wire_dtype());
      }
      if (answer != nullptr) answer->add_versions(var.version);
      applied = true;
    }
    response->add_versions(var.version);
  }
  apply_nanos_.fetch_add(absl::GetCurrentTimeNanos() - apply_start, std::memory_order_relaxed);
  if (skipped > 0) nonfinite_skipped_.fetch_add(skipped, std::memory_order_relaxed);
  if (stale) stale_dropped_.fetch_add(1, std::memory_order_relaxed);
  if (duplicate && !applied) duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
  response->set_stale(stale && !applied);
  response->set_duplicate(duplicate && !applied);
  if (applied) {
    // A step's push split over several requests counts once.
    if (request.part() == 0) pushes_applied_.fetch_add(1, std::memory_order_relaxed);
    gradients_applied_.fetch_add(1, std::memory_order_relaxed);
    staleness_sum_.fetch_add(staleness, std::memory_order_relaxed);
    int64_t prev = staleness_max_.load();
    while (staleness > prev && !staleness_max_.compare_exchange_weak(prev, staleness)) {
    }
  }
  ledger_.EndDensePush(mode, worker, request.step(), request.position());
  return absl::OkStatus();
}

absl::Status VariableStore::CheckCounter(int64_t value, absl::string_view what) {
  if (value < 0 || value >= kMaxCounter) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", value, " is out of range [0, 2^62)"));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::CheckGeneration(int64_t generation) const {
  if (generation != generation_) {
    return absl::AbortedError(absl::StrCat("gradient from restore generation ", generation,
                                           ", but this ps was restored from a "
                                           "checkpoint and is at generation ",
                                           generation_, "; pull the restored values first"));
  }
  return absl::OkStatus();
}

int64_t VariableStore::generation() const {
  absl::ReaderMutexLock lock(&mu_);
  return generation_;
}

absl::Status VariableStore::SetMembership(const proto::MembershipRequest& request) {
  {
    absl::ReaderMutexLock lock(&mu_);
    PST_RETURN_IF_ERROR(ledger_.SetMembership(request));
    // A lower quorum may complete an aggregation, dense or of rows.
    if (ledger_.mode() == proto::SYNC) {
      int64_t dropped = 0;
      for (auto& [name, var] : variables_) {
        if (RowSync* sync = RowSyncOf(*var, /*make=*/false)) {
          absl::MutexLock sync_lock(&sync->mu);
          RefreshRowSyncLocked(*sync, *var);
          MaybeApplyRowSyncLocked(*sync, *var, ledger_.quorum(), &dropped);
        }
        if (var->is_hash) continue;
        absl::MutexLock var_lock(&var->mu);
        var->MaybeApplyAggregateLocked(ledger_.quorum());
      }
      if (dropped > 0) unadmitted_dropped_.fetch_add(dropped, std::memory_order_relaxed);
    }
  }
  WakeWaiters();
  return absl::OkStatus();
}

VariableStore::Stats::TableFigures& VariableStore::Stats::TableFigures::operator+=(
    const TableFigures& o) {
  evictions += o.evictions;
  admissions += o.admissions;
  refused += o.refused;
  rows_on_disk += o.rows_on_disk;
  disk_reads += o.disk_reads;
  disk_writes += o.disk_writes;
  return *this;
}

VariableStore::Stats::TableFigures VariableStore::Stats::AllTables() const {
  TableFigures all;
  for (const auto& [name, figures] : tables) all += figures;
  return all;
}

VariableStore::Stats VariableStore::GetStats() const {
  absl::ReaderMutexLock lock(&mu_);
  Stats stats;
  stats.num_variables = static_cast<int>(variables_.size());
  for (const auto& [name, var] : variables_) {
    if (var->is_hash) {
      const int64_t rows = var->hash_rows();
      stats.hash_rows += rows;
      stats.num_elements += rows * var->dim;
      stats.table_rows[LogicalName(var->spec)] += rows;
      const HashRowTable& table = var->table_unlocked();
      stats.tables[LogicalName(var->spec)] +=
          Stats::TableFigures{table.evictions(),    table.admissions(), table.refused(),
                              table.rows_on_disk(), table.disk_reads(), table.disk_writes()};
    } else {
      stats.num_elements += var->rows * var->dim;
      if (var->spec.routing() == proto::MOD || var->spec.routing() == proto::DIV) {
        stats.table_rows[LogicalName(var->spec)] += var->rows;
      }
      absl::ReaderMutexLock var_lock(&var->mu);
      stats.max_version = std::max(stats.max_version, var->version.load());
    }
  }
  stats.generation = generation_;
  stats.pushes_applied = pushes_applied_.load(std::memory_order_relaxed);
  stats.nonfinite_skipped = nonfinite_skipped_.load(std::memory_order_relaxed);
  stats.unadmitted_dropped = unadmitted_dropped_.load(std::memory_order_relaxed);
  stats.gradients_applied = gradients_applied_.load();
  stats.staleness_sum = staleness_sum_.load();
  stats.staleness_max = staleness_max_.load();
  stats.stale_dropped = stale_dropped_.load();
  stats.duplicates_ignored = duplicates_ignored_.load();
  stats.apply_seconds = static_cast<double>(apply_nanos_.load()) * 1e-9;
  SyncLedger::Figures figures = ledger_.GetFigures();
  stats.parked_pulls = figures.parked_pulls;
  stats.parked_seconds = figures.parked_seconds;
  stats.max_clock_gap = figures.max_clock_gap;
  stats.worker_positions = std::move(figures.positions);
  return stats;
}

}  // namespace pst::ps
