#include "ps_server/store/variable_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/initializer.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "ps_server/store/spec_checks.h"
#include "ps_server/store/store_internal.h"

namespace pst::ps {
namespace {

using store_internal::kHashRowSpace;
using store_internal::LogicalName;
using store_internal::MixId;

using google::protobuf::util::MessageDifferencer;

// Product of the dimensions after the first (1 for rank 1).
int64_t RowElements(const proto::VariableSpec& spec) {
  int64_t dim = 1;
  for (int i = 1; i < spec.shape_size(); ++i) dim *= spec.shape(i);
  return dim;
}

proto::VariableSpec MakeFillSpec(const proto::VariableSpec& spec) {
  proto::VariableSpec fill = spec;
  if (spec.routing() == proto::MOD || spec.routing() == proto::DIV) {
    *fill.mutable_shape() = spec.full_shape();
  } else if (spec.routing() == proto::HASH) {
    const bool has_rows = spec.full_shape_size() > 0 && spec.full_shape(0) > 0;
    fill.set_shape(0, has_rows ? spec.full_shape(0) : static_cast<int64_t>(kHashRowSpace));
  }
  return fill;
}

}  // namespace

VariableStore::Variable::Variable(proto::VariableSpec s)
    : spec(std::move(s)),
      is_hash(spec.routing() == proto::HASH),
      rows(spec.shape(0)),
      dim(RowElements(spec)),
      fill_spec(MakeFillSpec(spec)) {}

int VariableStore::Variable::StripeOf(int64_t local) const {
  // Hash ids can be anything; mixed, they spread over the stripes evenly.
  const uint64_t key = is_hash ? MixId(local) : static_cast<uint64_t>(local);
  return static_cast<int>(key % kRowStripes);
}

VariableStore::VariableStore(Options options) : options_(options) {}

absl::StatusOr<int> VariableStore::Create(const proto::CreateVariablesRequest& request) {
  PST_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, CreateOptimizer(request.optimizer()));

  absl::MutexLock lock(&mu_);
  if (optimizer_ != nullptr &&
      !MessageDifferencer::Equals(optimizer_config_, request.optimizer())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this ps already runs optimizer '", optimizer_config_.name(), "' (learning_rate ",
        optimizer_config_.learning_rate(), "); it cannot change to '", request.optimizer().name(),
        "' (learning_rate ", request.optimizer().learning_rate(), ")"));
  }
  // The training mode: set by the first Create, the same ever after.
  const proto::SyncConfig& sync = request.sync();
  if (sync.num_workers() < 0 || sync.replicas_to_aggregate() < 0 || sync.staleness() < 0 ||
      sync.replicas_to_aggregate() > sync.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync config: need 0 <= replicas_to_aggregate <= num_workers and staleness >= 0; got ",
        sync.replicas_to_aggregate(), " of ", sync.num_workers(), ", staleness ",
        sync.staleness()));
  }
  if (sync.mode() != proto::ASYNC && sync.num_workers() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync config: mode ", proto::SyncMode_Name(sync.mode()), " needs num_workers >= 1"));
  }
  {
    absl::MutexLock wait_lock(&wait_mu_);
    if (sync_set_ && !MessageDifferencer::Equals(sync_, sync)) {
      return absl::FailedPreconditionError(
          absl::StrCat("this ps already trains in mode ", proto::SyncMode_Name(sync_.mode()),
                       " with ", sync_.num_workers(), " worker(s); it cannot change to ",
                       proto::SyncMode_Name(sync.mode()), " with ", sync.num_workers()));
    }
  }
  // Check everything before creating anything.
  if (request.initial_values_size() != 0 &&
      request.initial_values_size() != request.variables_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial_values has ", request.initial_values_size(), " entries for ",
                     request.variables_size(), " variables (need none, or one each)"));
  }
  absl::flat_hash_set<std::string_view> seen;
  std::vector<const proto::VariableSpec*> to_create;
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
  for (const proto::VariableSpec* spec : to_create) {
    if (spec->routing() == proto::HASH) continue;  // bounded by max_hash_rows
    absl::StatusOr<int64_t> elements = common::NumElements(spec->shape());
    if (!elements.ok()) return elements.status();
    const int64_t bytes = *elements * static_cast<int64_t>(sizeof(float)) *
                          (1 + optimizer->num_slots());
    new_bytes += bytes;
    if (new_bytes > options_.max_store_bytes - store_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "creating these variables would take this ps to ", store_bytes_ + new_bytes,
          " bytes of variables and optimizer slots (at '", spec->name(), "'); it holds at most ",
          options_.max_store_bytes, " (--max_variable_bytes); nothing was created"));
    }
  }
  // Allocate and initialize outside the map, then publish all at once.
  std::vector<std::unique_ptr<Variable>> created;
  for (size_t k = 0; k < to_create.size(); ++k) {
    const proto::VariableSpec* spec = to_create[k];
    auto var = std::make_unique<Variable>(*spec);
    absl::MutexLock var_lock(&var->mu);
    if (!var->is_hash) {
      const int64_t dim = var->dim;
      var->values.resize(var->rows * dim);
      // Local row r is global row offset + r * stride of the logical variable.
      const bool whole = spec->routing() == proto::ROUTING_NONE;
      const int64_t offset = whole ? 0 : spec->row_offset();
      const int64_t stride = whole ? 1 : spec->row_stride();
      if (initial_values[k] != nullptr) {  // sizes checked above
        std::memcpy(var->values.data(), initial_values[k]->data(), initial_values[k]->size());
      } else {
        for (int64_t r = 0; r < var->rows; ++r) {
          common::FillInitialValues(var->fill_spec, (offset + r * stride) * dim,
                                    std::span<float>(var->values.data() + r * dim, dim));
        }
      }
      for (int s = 0; s < optimizer->num_slots(); ++s) {
        var->slots.emplace_back(var->values.size(), optimizer->SlotInitialValue(s));
      }
    }
    created.push_back(std::move(var));
  }
  for (auto& var : created) {
    std::string name = var->spec.name();
    variables_.emplace(std::move(name), std::move(var));
  }
  store_bytes_ += new_bytes;
  if (optimizer_ == nullptr) {
    optimizer_ = std::move(optimizer);
    optimizer_config_ = request.optimizer();
  }
  absl::MutexLock wait_lock(&wait_mu_);
  if (!sync_set_) {
    sync_set_ = true;
    sync_ = sync;
    active_.assign(sync.num_workers(), true);
    clocks_.assign(sync.num_workers(), 0);
    const int r =
        sync.replicas_to_aggregate() > 0 ? sync.replicas_to_aggregate() : sync.num_workers();
    quorum_.store(std::max(1, r));
  }
  return static_cast<int>(created.size());
}

absl::StatusOr<VariableStore::Variable*> VariableStore::Find(const std::string& name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("no variable named '", name, "' on this ps"));
  }
  return it->second.get();
}

namespace {

absl::Status HashNeedsRowOps(const std::string& name, absl::string_view op) {
  return absl::FailedPreconditionError(
      absl::StrCat("variable '", name, "' is a hash embedding (rows made on first touch) and has ",
                   "no dense form; use ", op));
}

// PackFloats into a buffer from the payload pool (the wire codec gives it
// back once the answer is sent).
void PackPooled(std::span<const float> values, const common::Shape& shape, proto::Tensor* value) {
  common::PayloadBufferPool::Default().Take(values.size_bytes(), value->mutable_data());
  common::PackFloats(values, shape, value);
}

}  // namespace

absl::Status VariableStore::Pull(const google::protobuf::RepeatedPtrField<std::string>& names,
                                 proto::PullResponse* response) const {
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
    answer_bytes += var->rows * var->dim * static_cast<int64_t>(sizeof(float));
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
    PackPooled(var->values, var->spec.shape(), response->add_values());
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
  if (optimizer_ == nullptr) {
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
    if (common::AllFinite(payload[i])) continue;
    grads[i].resize(common::PayloadBytes(payload[i]) / sizeof(float));
    common::CopyPayload(payload[i], grads[i]);
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
  proto::SyncMode mode;
  {
    absl::MutexLock wait_lock(&wait_mu_);
    PST_RETURN_IF_ERROR(CheckWorkerLocked(worker, /*allow_none=*/false));
    mode = sync_.mode();
    // A push is identified by (worker, incarnation, part, step) when it
    // carries an incarnation; a repeat (a retry) is acknowledged and not
    // applied again.
    // SYNC recognizes repeats per variable version instead (below).
    if (mode != proto::SYNC && request.incarnation() != 0) {
      PushKey& key = last_push_[{worker, request.part()}];
      if (key.incarnation != request.incarnation()) key = PushKey{request.incarnation(), -1, -1};
      if (request.step() <= key.dense_step) {
        duplicates_ignored_.fetch_add(1, std::memory_order_relaxed);
        response->set_duplicate(true);
        return absl::OkStatus();
      }
      key.dense_step = request.step();
    }
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
      if (request.step() < var.version) {
        stale = true;
      } else if (std::find(var.contributors.begin(), var.contributors.end(), worker) !=
                 var.contributors.end()) {
        duplicate = true;
      } else {
        if (var.accum.empty()) var.accum.assign(var.values.size(), 0.0f);
        if (grads[i].empty()) {
          common::AddPayload(payload[i], var.accum);
        } else {
          for (size_t k = 0; k < grads[i].size(); ++k) {
            if (skip[i].empty() || !skip[i][k / var.dim]) var.accum[k] += grads[i][k];
          }
        }
        var.contributors.push_back(worker);
        MaybeApplyAggregateLocked(var, quorum_.load());
        applied = true;
      }
    } else {
      staleness = std::max<int64_t>(staleness, var.version - request.base_version());
      proto::Tensor* value = nullptr;
      if (answer != nullptr) {
        answer->add_names(var.spec.name());
        value = answer->add_values();
      }
      if (grads[i].empty()) {
        ApplyPayloadLocked(var, payload[i], value);
      } else {
        ApplyLocked(var, grads[i], skip[i]);
        if (value != nullptr) PackPooled(var.values, var.spec.shape(), value);
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
  {
    absl::MutexLock wait_lock(&wait_mu_);
    if (mode == proto::SSP && worker >= 0 && worker < static_cast<int>(clocks_.size())) {
      clocks_[worker] = std::max(clocks_[worker], request.step() + 1);
    }
    // The batch is consumed, whether its gradient was applied, aggregated,
    // already there or too late: a restarted worker goes on after it.
    if (request.position() >= 0 && worker >= 0) {
      int64_t& position = positions_[worker];
      position = std::max(position, request.position() + 1);
    }
  }
  return absl::OkStatus();
}

void VariableStore::ApplyLocked(Variable& var, const std::vector<float>& grad,
                                const std::vector<bool>& skip) {
  std::vector<std::span<float>> slots(var.slots.begin(), var.slots.end());
  const int64_t t = var.version + 1;
  if (skip.empty()) {
    optimizer_->ApplyDense(var.values, grad, slots, t);
  } else {
    const int64_t dim = var.dim;
    std::vector<std::span<float>> row_slots(slots.size());
    for (int64_t r = 0; r < var.rows; ++r) {
      if (skip[r]) continue;
      for (size_t s = 0; s < slots.size(); ++s) row_slots[s] = slots[s].subspan(r * dim, dim);
      optimizer_->ApplyDense(std::span<float>(var.values).subspan(r * dim, dim),
                             std::span<const float>(grad).subspan(r * dim, dim), row_slots, t);
    }
  }
  var.version = t;
}

void VariableStore::ApplyPayloadLocked(Variable& var, common::PayloadParts payload,
                                       proto::Tensor* value) {
  const int64_t t = var.version + 1;
  std::string* out = nullptr;
  if (value != nullptr) {
    value->set_dtype(proto::DT_FLOAT32);
    *value->mutable_shape() = var.spec.shape();
    out = value->mutable_data();
    common::PayloadBufferPool::Default().Take(var.values.size() * sizeof(float), out);
  }
  std::vector<std::span<float>> slots(var.slots.size());
  common::ForEachFloatBlock(payload, [&](int64_t offset, std::span<const float> block) {
    for (size_t s = 0; s < slots.size(); ++s) {
      slots[s] = std::span<float>(var.slots[s]).subspan(offset, block.size());
    }
    const std::span<float> params = std::span<float>(var.values).subspan(offset, block.size());
    optimizer_->ApplyDense(params, block, slots, t);
    // Copied while the block is still in the L1 cache: no second pass over
    // the variable (appended, as resize() would zero the string first).
    if (out != nullptr) {
      out->append(reinterpret_cast<const char*>(params.data()), params.size_bytes());
    }
  });
  var.version = t;
}

void VariableStore::MaybeApplyAggregateLocked(Variable& var, int quorum) {
  if (var.contributors.empty() || static_cast<int>(var.contributors.size()) < quorum) return;
  const float scale = 1.0f / static_cast<float>(var.contributors.size());
  for (float& g : var.accum) g *= scale;
  ApplyLocked(var, var.accum, {});
  std::fill(var.accum.begin(), var.accum.end(), 0.0f);
  var.contributors.clear();
}

absl::Status VariableStore::CheckWorkerLocked(int32_t worker, bool allow_none) const {
  if (allow_none && worker == -1) return absl::OkStatus();
  const int32_t limit = sync_set_ && sync_.num_workers() > 0 ? sync_.num_workers()
                                                             : options_.max_workers;
  if (worker < 0 || worker >= limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_index ", worker, " is out of range: this job has ", limit, " worker(s)",
        allow_none ? " (-1: not a worker)" : ""));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::CheckCounter(int64_t value, absl::string_view what) {
  if (value < 0 || value >= kMaxCounter) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", value, " is out of range [0, 2^62)"));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::SetMembership(const proto::MembershipRequest& request) {
  {
    absl::ReaderMutexLock lock(&mu_);
    absl::MutexLock wait_lock(&wait_mu_);
    if (request.replicas_to_aggregate() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("membership: replicas_to_aggregate must be "
                       ">= 1, got ",
                       request.replicas_to_aggregate()));
    }
    std::vector<bool> active(active_.size(), false);
    for (int32_t w : request.active_workers()) {
      if (w < 0 || w >= static_cast<int>(active.size())) {
        return absl::InvalidArgumentError(absl::StrCat("membership: worker ", w,
                                                       " is out of range: this job has ",
                                                       active.size(), " worker(s)"));
      }
      active[w] = true;
    }
    active_ = std::move(active);
    const int live = std::max(1, static_cast<int>(request.active_workers_size()));
    quorum_.store(std::min(request.replicas_to_aggregate(), live));
    if (sync_.mode() == proto::SYNC) {
      for (auto& [name, var] : variables_) {
        absl::MutexLock var_lock(&var->mu);
        MaybeApplyAggregateLocked(*var, quorum_.load());
      }
    }
  }
  WakeWaiters();
  return absl::OkStatus();
}

absl::Status VariableStore::PushPull(const proto::PushPullRequest& request,
                                     proto::PullResponse* response) {
  absl::Notification done;
  absl::Status result;
  PushPullWhenReady(&request, response, [&](absl::Status status) {
    result = std::move(status);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
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

VariableStore::Stats VariableStore::GetStats() const {
  absl::ReaderMutexLock lock(&mu_);
  Stats stats;
  stats.num_variables = static_cast<int>(variables_.size());
  for (const auto& [name, var] : variables_) {
    if (var->is_hash) {
      const int64_t rows = var->num_hash_rows.load(std::memory_order_relaxed);
      stats.hash_rows += rows;
      stats.num_elements += rows * var->dim;
      stats.table_rows[LogicalName(var->spec)] += rows;
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
  absl::MutexLock wait_lock(&wait_mu_);
  stats.parked_pulls = parked_pulls_;
  stats.parked_seconds = parked_seconds_;
  for (const Waiter& w : waiters_) {
    stats.parked_seconds += absl::ToDoubleSeconds(absl::Now() - w.since);
  }
  stats.max_clock_gap = max_clock_gap_;
  stats.worker_positions = positions_;
  return stats;
}

}  // namespace pst::ps
