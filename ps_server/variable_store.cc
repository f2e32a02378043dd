#include "ps_server/variable_store.h"

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
#include "ps_server/spec_checks.h"

namespace pst::ps {
namespace {

using google::protobuf::util::MessageDifferencer;

// Rows a hash variable's initializer is drawn as, when full_shape gives no
// row count: ids are taken modulo this.
constexpr uint64_t kHashRowSpace = uint64_t{1} << 62;

// The logical variable a spec is part of, for messages.
const std::string& LogicalName(const proto::VariableSpec& spec) {
  return spec.variable().empty() ? spec.name() : spec.variable();
}

// Product of the dimensions after the first (1 for rank 1).
int64_t RowElements(const proto::VariableSpec& spec) {
  int64_t dim = 1;
  for (int i = 1; i < spec.shape_size(); ++i) dim *= spec.shape(i);
  return dim;
}

int HashPartitionOf(int64_t id, int partitions) {
  return static_cast<int>(static_cast<uint64_t>(id) % static_cast<uint64_t>(partitions));
}

uint64_t MixId(int64_t id) {
  uint64_t x = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
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

class VariableStore::WholeReadLock {
 public:
  explicit WholeReadLock(const Variable& var) : mu_(&var.mu) {
    mu_->ReaderLock();
    if (!var.row_pushes_striped) return;
    // Row pushes change rows while holding the lock shared: exclude them.
    // The flag never goes back to false, so it still holds once relocked.
    mu_->ReaderUnlock();
    mu_->Lock();
    exclusive_ = true;
  }
  ~WholeReadLock() {
    if (exclusive_) {
      mu_->Unlock();
    } else {
      mu_->ReaderUnlock();
    }
  }
  WholeReadLock(const WholeReadLock&) = delete;
  WholeReadLock& operator=(const WholeReadLock&) = delete;

 private:
  absl::Mutex* const mu_;
  bool exclusive_ = false;
};

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

int64_t VariableStore::MinActiveClockLocked() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (active_[w]) min_clock = std::min(min_clock, clocks_[w]);
  }
  return min_clock;
}

bool VariableStore::ReadyLocked(const proto::PullRequest& request) {
  if (request.worker_index() < 0 || !sync_set_) return true;
  switch (sync_.mode()) {
    case proto::SYNC: {
      auto reached = [&](const Variable& var) {
        absl::ReaderMutexLock var_lock(&var.mu);
        return var.version >= request.min_version();
      };
      if (request.names().empty()) {
        for (const auto& [name, var] : variables_) {
          if (!var->is_hash && !reached(*var)) return false;
        }
        return true;
      }
      for (const std::string& name : request.names()) {
        auto it = variables_.find(name);
        if (it != variables_.end() && !reached(*it->second)) return false;
      }
      return true;
    }
    case proto::SSP: {
      const int64_t min_clock = MinActiveClockLocked();
      if (min_clock == std::numeric_limits<int64_t>::max()) return true;
      if (request.clock() - sync_.staleness() > min_clock) return false;
      max_clock_gap_ = std::max(max_clock_gap_, request.clock() - min_clock);
      return true;
    }
    default:
      return true;
  }
}

uint64_t VariableStore::PullWhenReady(const proto::PullRequest* request,
                                      proto::PullResponse* response, Done done) {
  absl::Status checked = CheckCounter(request->min_version(), "min_version");
  if (checked.ok()) checked = CheckCounter(request->clock(), "clock");
  bool full = false;
  if (checked.ok()) {
    absl::ReaderMutexLock lock(&mu_);
    absl::MutexLock wait_lock(&wait_mu_);
    checked = CheckWorkerLocked(request->worker_index(), /*allow_none=*/true);
    if (checked.ok() && !ReadyLocked(*request)) {
      full = static_cast<int64_t>(waiters_.size()) >= options_.max_parked_pulls;
      if (!full) {
        const uint64_t ticket = next_ticket_++;
        waiters_.push_back({ticket, *request, response, std::move(done), absl::Now()});
        ++parked_pulls_;
        return ticket;
      }
    }
  }
  if (!checked.ok()) {
    done(checked);
    return 0;
  }
  if (full) {
    done(absl::ResourceExhaustedError(absl::StrCat(
        "this ps already holds ", options_.max_parked_pulls,
        " pulls waiting for a version or clock (--max_parked_pulls); pull again later")));
    return 0;
  }
  done(Pull(request->names(), response));
  return 0;
}

uint64_t VariableStore::PushPullWhenReady(const proto::PushPullRequest* request,
                                          proto::PullResponse* response, Done done,
                                          const Payloads* payloads) {
  proto::PushResponse pushed;
  response->Clear();
  absl::Status status = PushNoWake(request->push(), &pushed, payloads, response);
  if (!status.ok()) {
    done(status);
    return 0;
  }
  WakeWaiters();
  // ASYNC: the push answered with the values it left, under the same lock.
  if (request->push().names_size() > 0 && response->values_size() == request->push().names_size()) {
    done(absl::OkStatus());
    return 0;
  }
  proto::PullRequest pull;
  *pull.mutable_names() = request->push().names();
  pull.set_worker_index(request->push().worker_index());
  pull.set_min_version(request->push().step() + 1);
  pull.set_clock(request->push().step() + 1);
  // PullWhenReady copies the request when it parks.
  return PullWhenReady(&pull, response, std::move(done));
}

void VariableStore::WakeWaiters() {
  std::vector<Waiter> ready;
  {
    absl::ReaderMutexLock lock(&mu_);
    absl::MutexLock wait_lock(&wait_mu_);
    if (waiters_.empty()) return;
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < waiters_.size();) {
      if (ReadyLocked(waiters_[i].request)) {
        parked_seconds_ += absl::ToDoubleSeconds(now - waiters_[i].since);
        ready.push_back(std::move(waiters_[i]));
        waiters_.erase(waiters_.begin() + i);
      } else {
        ++i;
      }
    }
  }
  for (Waiter& w : ready) w.done(Pull(w.request.names(), w.response));
}

bool VariableStore::CancelWaiter(uint64_t ticket) {
  absl::MutexLock wait_lock(&wait_mu_);
  for (size_t i = 0; i < waiters_.size(); ++i) {
    if (waiters_[i].ticket == ticket) {
      parked_seconds_ += absl::ToDoubleSeconds(absl::Now() - waiters_[i].since);
      waiters_.erase(waiters_.begin() + i);
      return true;
    }
  }
  return false;
}

void VariableStore::CancelAllWaiters(const absl::Status& status) {
  std::vector<Waiter> all;
  {
    absl::MutexLock wait_lock(&wait_mu_);
    all.swap(waiters_);
  }
  for (Waiter& w : all) w.done(status);
}

int VariableStore::ExpireParked(absl::Duration max_wait) {
  std::vector<Waiter> expired;
  {
    absl::MutexLock wait_lock(&wait_mu_);
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < waiters_.size();) {
      if (now - waiters_[i].since > max_wait) {
        parked_seconds_ += absl::ToDoubleSeconds(now - waiters_[i].since);
        expired.push_back(std::move(waiters_[i]));
        waiters_.erase(waiters_.begin() + i);
      } else {
        ++i;
      }
    }
  }
  for (Waiter& w : expired) {
    w.done(absl::DeadlineExceededError(absl::StrCat(
        "this pull waited ", absl::FormatDuration(max_wait),
        " (--max_park_s) for a version or clock that did not come; pull again")));
  }
  return static_cast<int>(expired.size());
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

std::vector<common::ShardRecord> VariableStore::Snapshot(absl::Duration* held, Cut* cut) const {
  if (held != nullptr) *held = absl::ZeroDuration();
  // Allocate (and fault in) the copies of the dense variables first, while
  // training goes on: pushes are held only for the copy itself.
  absl::flat_hash_map<std::string, common::ShardRecord> ready;
  int num_slots = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    num_slots = optimizer_ == nullptr ? 0 : optimizer_->num_slots();
    for (const auto& [name, var] : variables_) {
      if (var->is_hash) continue;
      common::ShardRecord& r = ready[name];
      const size_t n = static_cast<size_t>(var->rows * var->dim);
      r.values.resize(n);
      r.slots.assign(num_slots, std::vector<float>(n));
    }
  }
  // The store held exclusively: no push is half-way through, none starts,
  // and the records and the cut describe one instant.
  absl::MutexLock lock(&mu_);
  const absl::Time locked = absl::Now();
  num_slots = optimizer_ == nullptr ? 0 : optimizer_->num_slots();
  std::vector<const Variable*> vars;
  for (const auto& [name, var] : variables_) vars.push_back(var.get());
  std::sort(vars.begin(), vars.end(),
            [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  std::vector<common::ShardRecord> records;
  records.reserve(vars.size());
  bool sync_pending = false, holds_dense = false;
  int64_t max_version = 0;
  for (const Variable* var : vars) {
    holds_dense |= !var->is_hash;
    WholeReadLock var_lock(*var);
    sync_pending |= !var->contributors.empty();
    common::ShardRecord r;
    if (auto it = ready.find(var->spec.name()); it != ready.end()) r = std::move(it->second);
    r.spec = var->spec;
    r.version = var->version;
    if (!var->is_hash) {
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
    } else {
      const int64_t dim = var->dim;
      r.rows = static_cast<int64_t>(var->hash_rows.size());
      r.values.reserve(r.rows * dim);
      r.slots.assign(num_slots, {});
      for (const auto& [id, row] : var->hash_rows) {
        r.hash_ids.push_back(id);
        r.values.insert(r.values.end(), row.begin(), row.begin() + dim);
        for (int sl = 0; sl < num_slots; ++sl) {
          r.slots[sl].insert(r.slots[sl].end(), row.begin() + (sl + 1) * dim,
                             row.begin() + (sl + 2) * dim);
        }
      }
    }
    records.push_back(std::move(r));
  }
  if (cut != nullptr) {
    absl::MutexLock wait_lock(&wait_mu_);
    *cut = CutLocked();
    cut->sync_pending = sync_pending;
    cut->holds_dense = holds_dense;
    cut->max_version = max_version;
  }
  if (held != nullptr) *held = absl::Now() - locked;
  return records;
}

VariableStore::Cut VariableStore::CutLocked() const {
  absl::flat_hash_map<int32_t, proto::WorkerCut> workers;
  auto at = [&](int32_t w) -> proto::WorkerCut& {
    auto [it, fresh] = workers.try_emplace(w);
    if (fresh) {
      it->second.set_worker_index(w);
      it->second.set_position(-1);
      it->second.set_min_step(std::numeric_limits<int64_t>::max());
      it->second.set_max_step(-1);
      it->second.set_rows_step(-1);
    }
    return it->second;
  };
  for (const auto& [key, push] : last_push_) {
    proto::WorkerCut& c = at(key.first);
    if (push.dense_step >= 0) {
      c.set_min_step(std::min(c.min_step(), push.dense_step));
      c.set_max_step(std::max(c.max_step(), push.dense_step));
    }
    if (key.second == 0) c.set_rows_step(std::max(c.rows_step(), push.rows_step));
  }
  for (const auto& [w, position] : positions_) at(w).set_position(position);
  Cut cut;
  for (auto& [w, c] : workers) {
    if (c.max_step() < 0) c.set_min_step(-1);
    cut.workers.push_back(std::move(c));
  }
  std::sort(cut.workers.begin(), cut.workers.end(),
            [](const auto& a, const auto& b) { return a.worker_index() < b.worker_index(); });
  return cut;
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
