#include "ps_server/store/variable.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "ps_server/store/store_internal.h"

namespace pst::ps {
namespace {

using store_internal::HashPartitionOf;
using store_internal::kHashRowSpace;
using store_internal::LogicalName;

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

// The table's admission and bound from `spec` (checked by ValidateSpec).
HashRowTable::Limits WithSpec(HashRowTable::Limits limits, const proto::VariableSpec& spec) {
  limits.admit_after = spec.admit_after();
  if (spec.routing() == proto::HASH) {
    limits.policy =
        common::ParseTablePolicy(spec.capacity(), spec.eviction(), spec.name()).value_or(
            common::TablePolicy{});
  }
  return limits;
}

std::vector<float> SlotInitialValues(const Optimizer& optimizer) {
  std::vector<float> init(optimizer.num_slots());
  for (int s = 0; s < optimizer.num_slots(); ++s) init[s] = optimizer.SlotInitialValue(s);
  return init;
}

}  // namespace

Variable::Variable(proto::VariableSpec s, Optimizer& o, HashRowTable::Limits limits,
                   const std::string* initial_values)
    : spec(std::move(s)),
      optimizer(o),
      is_hash(spec.routing() == proto::HASH),
      rows(spec.shape(0)),
      dim(RowElements(spec)),
      fill_spec(MakeFillSpec(spec)),
      table(WithSpec(limits, spec), dim, SlotInitialValues(optimizer),
            [this](int64_t id, std::span<float> out) {
              // Element j of row `id` starts at element (id mod 2^62) * dim + j
              // of the initializer.
              const uint64_t first =
                  (static_cast<uint64_t>(id) & (kHashRowSpace - 1)) * static_cast<uint64_t>(dim);
              common::FillInitialValues(fill_spec, static_cast<int64_t>(first), out);
            }) {
  if (is_hash) return;
  values.resize(rows * dim);
  // Local row r is global row offset + r * stride of the logical variable.
  const bool whole = spec.routing() == proto::ROUTING_NONE;
  const int64_t offset = whole ? 0 : spec.row_offset();
  const int64_t stride = whole ? 1 : spec.row_stride();
  if (initial_values != nullptr) {  // sizes checked by the caller
    std::memcpy(values.data(), initial_values->data(), initial_values->size());
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      common::FillInitialValues(fill_spec, (offset + r * stride) * dim,
                                std::span<float>(values.data() + r * dim, dim));
    }
  }
  for (int s = 0; s < optimizer.num_slots(); ++s) {
    slots.emplace_back(values.size(), optimizer.SlotInitialValue(s));
  }
}

int Variable::StripeOf(int64_t local) const {
  if (is_hash) return HashRowTable::StripeOf(local);
  return static_cast<int>(static_cast<uint64_t>(local) % kRowStripes);
}

template <typename Fn>
void Variable::ForEachRowByStripe(const std::vector<int64_t>& local, bool write, Fn fn) const {
  // Counting sort by stripe, so each stripe is locked once per call.
  std::array<int32_t, kRowStripes + 1> start{};
  std::vector<int32_t> stripe_of(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    stripe_of[i] = StripeOf(local[i]);
    ++start[stripe_of[i] + 1];
  }
  for (int s = 0; s < kRowStripes; ++s) start[s + 1] += start[s];
  std::array<int32_t, kRowStripes> next;
  std::copy_n(start.begin(), kRowStripes, next.begin());
  std::vector<int32_t> order(local.size());
  for (size_t i = 0; i < local.size(); ++i) order[next[stripe_of[i]]++] = static_cast<int32_t>(i);
  for (int s = 0; s < kRowStripes; ++s) {
    if (start[s] == start[s + 1]) continue;
    if (write) {
      absl::MutexLock lock(&stripes_[s]);
      for (int32_t k = start[s]; k < start[s + 1]; ++k) fn(order[k]);
    } else {
      absl::ReaderMutexLock lock(&stripes_[s]);
      for (int32_t k = start[s]; k < start[s + 1]; ++k) fn(order[k]);
    }
  }
}

Variable::~Variable() {
  absl::MutexLock lock(&mu);
  PreserveForSnapshotLocked(/*force=*/true);
}

void Variable::PreserveForSnapshotLocked(bool force) const {
  if (std::shared_ptr<DenseSnapshotHold> hold = snapshot_hold.lock()) hold->Preserve(force);
  snapshot_hold.reset();
}

void Variable::ApplyLocked(std::span<const float> grad, const std::vector<bool>& skip) {
  PreserveForSnapshotLocked();
  std::vector<std::span<float>> slot_spans(slots.begin(), slots.end());
  const int64_t t = version + 1;
  const Step step = optimizer.StepAt(t);
  if (skip.empty()) {
    optimizer.Apply(values, grad, slot_spans, step);
  } else {
    std::vector<std::span<float>> row_slots(slot_spans.size());
    for (int64_t r = 0; r < rows; ++r) {
      if (skip[r]) continue;
      for (size_t s = 0; s < slot_spans.size(); ++s) {
        row_slots[s] = slot_spans[s].subspan(r * dim, dim);
      }
      optimizer.Apply(std::span<float>(values).subspan(r * dim, dim), grad.subspan(r * dim, dim),
                      row_slots, step);
    }
  }
  version = t;
}

void Variable::ApplyPayloadLocked(common::PayloadParts payload, proto::DType dtype,
                                  proto::Tensor* value, proto::DType value_dtype) {
  PreserveForSnapshotLocked();
  const int64_t t = version + 1;
  const Step step = optimizer.StepAt(t);
  std::string* out = nullptr;
  value_dtype = common::AnswerDtype(value_dtype);
  if (value != nullptr) {
    value->set_dtype(value_dtype);
    *value->mutable_shape() = spec.shape();
    out = value->mutable_data();
    common::PayloadBufferPool::Default().Take(values.size() * common::WireElementBytes(value_dtype),
                                              out);
  }
  std::vector<std::span<float>> slot_spans(slots.size());
  common::ForEachFloatBlock(
      payload, dtype,
      [&](int64_t offset, std::span<const float> block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        for (size_t s = 0; s < slot_spans.size(); ++s) {
          slot_spans[s] = std::span<float>(slots[s]).subspan(offset, block.size());
        }
        const std::span<float> params = std::span<float>(values).subspan(offset, block.size());
        optimizer.Apply(params, block, slot_spans, step);
        // Copied while the block is still in the L1 cache: no second pass over
        // the variable (appended, as resize() would zero the string first).
        if (out != nullptr) common::AppendAs(params, value_dtype, out);
      });
  version = t;
}

Variable::SyncAdd Variable::AddToAggregateLocked(int64_t step, int32_t worker,
                                                 common::PayloadParts payload, proto::DType dtype,
                                                 const std::vector<float>& grad,
                                                 const std::vector<bool>& skip, int quorum) {
  if (step < version) return SyncAdd::kStale;
  if (std::find(contributors.begin(), contributors.end(), worker) != contributors.end()) {
    return SyncAdd::kDuplicate;
  }
  if (accum.empty()) accum.assign(values.size(), 0.0f);
  if (grad.empty()) {
    common::AddPayload(payload, dtype, accum);
  } else {
    for (size_t k = 0; k < grad.size(); ++k) {
      if (skip.empty() || !skip[k / dim]) accum[k] += grad[k];
    }
  }
  contributors.push_back(worker);
  MaybeApplyAggregateLocked(quorum);
  return SyncAdd::kAdded;
}

void Variable::MaybeApplyAggregateLocked(int quorum) {
  if (contributors.empty() || static_cast<int>(contributors.size()) < quorum) return;
  const float scale = 1.0f / static_cast<float>(contributors.size());
  for (float& g : accum) g *= scale;
  ApplyLocked(accum, {});
  std::fill(accum.begin(), accum.end(), 0.0f);
  contributors.clear();
}

void Variable::PackValuesLocked(proto::Tensor* value, proto::DType dtype) const {
  dtype = common::AnswerDtype(dtype);
  // From the payload pool: the wire codec gives the buffer back once the
  // answer is sent.
  common::PayloadBufferPool::Default().Take(values.size() * common::WireElementBytes(dtype),
                                            value->mutable_data());
  value->set_dtype(dtype);
  *value->mutable_shape() = spec.shape();
  common::AppendAs(values, dtype, value->mutable_data());
}

absl::Status Variable::LocalRows(const proto::RowIds& ids, std::vector<int64_t>* local) const {
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
        if (id < 0 || id >= rows) {
          return absl::InvalidArgumentError(absl::StrCat("id ", id,
                                                         " is out of range for variable '", name,
                                                         "' (valid ids: [0, ", rows, "))"));
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
          const int64_t lo = spec.row_offset(), hi = lo + rows;
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

absl::Status Variable::CheckRoom(const std::vector<int64_t>& ids) const {
  absl::ReaderMutexLock lock(&mu);
  return table.CheckRoom(ids, spec.name());
}

int64_t Variable::ReadRows(const std::vector<int64_t>& local, float* out) {
  {
    absl::ReaderMutexLock lock(&mu);
    // The hash map itself only changes under mu held exclusively.
    if (!is_hash || (table.ContainsAll(local) && !table.ExpiryDue(version))) {
      auto source = [&](size_t r) ABSL_SHARED_LOCKS_REQUIRED(mu) -> const float* {
        return is_hash ? table.Find(local[r]) : values.data() + local[r] * dim;
      };
      if (row_pushes_striped) {
        ForEachRowByStripe(local, /*write=*/false, [&](size_t r) ABSL_SHARED_LOCKS_REQUIRED(mu) {
          std::copy_n(source(r), dim, out + r * dim);
        });
      } else {
        for (size_t r = 0; r < local.size(); ++r) std::copy_n(source(r), dim, out + r * dim);
      }
      return version;
    }
    // Rows on disk are read under mu held shared: only a holder of mu held
    // exclusively moves rows between the tiers. An id stored in neither
    // reads as its initial values here too, unless admission counts it.
    if (table.has_disk() && !table.ExpiryDue(version)) {
      const int64_t now = version;
      const bool counts = table.limits().admit_after > 1;
      bool all = true;
      // The rows on disk in one batched read first; those in memory under
      // their stripes' locks, as above.
      std::vector<char> on_disk;
      table.ReadFromDisk(local, now, out, &on_disk);
      auto read = [&](size_t r) ABSL_SHARED_LOCKS_REQUIRED(mu) {
        if (!all || on_disk[r]) return;
        std::span<float> to(out + r * dim, dim);
        if (const float* row = table.Find(local[r])) {
          std::copy_n(row, dim, to.data());
          return;
        }
        if (counts) {
          all = false;
        } else {
          table.InitialValues(local[r], to);
        }
      };
      if (row_pushes_striped) {
        ForEachRowByStripe(local, /*write=*/false, read);
      } else {
        for (size_t r = 0; r < local.size(); ++r) read(r);
      }
      if (all) return now;
    }
  }
  // Some rows are not stored. A read stores none: an unseen id reads as its
  // initial values (zeros while admission has not admitted it, and the read
  // counts as a touch); its row is made by the first push. Stale rows (ttl)
  // go first.
  absl::MutexLock lock(&mu);
  table.Expire(version);
  for (size_t r = 0; r < local.size(); ++r) {
    float* to = out + r * dim;
    if (table.ReadStored(local[r], version, std::span<float>(to, dim))) {
      continue;
    } else if (table.CountTouch(local[r])) {
      table.InitialValues(local[r], std::span<float>(to, dim));
    } else {
      std::fill_n(to, dim, 0.0f);
    }
  }
  return version;
}

int64_t Variable::ApplyRows(const std::vector<int64_t>& local, std::span<const float> grad,
                            const std::vector<bool>& skip, int64_t* dropped) {
  int64_t t;
  if (TryApplyRowsShared(local, grad, skip, &t)) return t;
  const int num_slots = optimizer.num_slots();
  std::vector<std::span<float>> row_slots(num_slots);
  absl::MutexLock lock(&mu);
  row_pushes_striped = true;
  t = version + 1;
  const Step step = optimizer.StepAt(t);
  if (is_hash) {
    table.Expire(t);
    table.Prefetch(local);  // the push's rows on disk, in one read
  } else {
    PreserveForSnapshotLocked();
  }
  for (size_t r = 0; r < local.size(); ++r) {
    if (skip[r]) continue;
    float* hash_row = nullptr;
    if (is_hash) {
      hash_row = table.Touch(local[r], t);
      if (hash_row == nullptr) {
        ++*dropped;
        continue;
      }
    }
    ApplyToRow(hash_row, local[r], grad.subspan(r * dim, dim), step, &row_slots);
  }
  // The rows this push evicted, to disk in one write (before the lock goes).
  if (is_hash) table.FlushEvictions();
  version = t;
  return t;
}

void Variable::ApplyToRow(float* hash_row, int64_t local, std::span<const float> grad,
                          const Step& step, std::vector<std::span<float>>* row_slots) {
  const size_t width = static_cast<size_t>(dim);
  float* row;
  if (hash_row != nullptr) {
    row = hash_row;
    for (size_t s = 0; s < row_slots->size(); ++s) {
      (*row_slots)[s] = {row + (s + 1) * width, width};
    }
  } else {
    const int64_t offset = local * dim;
    row = values.data() + offset;
    for (size_t s = 0; s < row_slots->size(); ++s) {
      (*row_slots)[s] = {slots[s].data() + offset, width};
    }
  }
  optimizer.Apply(std::span<float>(row, width), grad, *row_slots, step);
}

bool Variable::TryApplyRowsShared(const std::vector<int64_t>& local, std::span<const float> grad,
                                  const std::vector<bool>& skip, int64_t* version_out) {
  absl::ReaderMutexLock lock(&mu);
  if (!row_pushes_striped) return false;
  if (is_hash && (!table.ContainsAll(local) || table.ExpiryDue(version + 1))) return false;
  // A snapshot still holds the values: it must see them whole, first.
  if (!is_hash && !snapshot_hold.expired()) return false;
  const int num_slots = optimizer.num_slots();
  // Adam's t: every push gets its own count, whatever order rows land in.
  const int64_t t = version.fetch_add(1) + 1;
  const Step step = optimizer.StepAt(t);
  std::vector<std::span<float>> row_slots(num_slots);
  // Rows change under mu held shared: each under its stripe's lock.
  ForEachRowByStripe(local, /*write=*/true, [&](size_t r) ABSL_SHARED_LOCKS_REQUIRED(mu) {
    if (skip[r]) return;
    if (is_hash) table.NoteUpdate(local[r], t);
    ApplyToRow(is_hash ? table.Find(local[r]) : nullptr, local[r], grad.subspan(r * dim, dim), step,
               &row_slots);
  });
  *version_out = t;
  return true;
}

void Variable::CopyStoredRows(const std::vector<int64_t>& ids, StoredRowFn fn) const {
  // Batches, so that a push that makes rows (mu held exclusively) waits
  // for one batch at most.
  constexpr size_t kBatch = 4096;
  const size_t width = static_cast<size_t>(table.width());
  std::vector<int64_t> batch;
  for (size_t first = 0; first < ids.size(); first += kBatch) {
    batch.assign(ids.begin() + first, ids.begin() + std::min(ids.size(), first + kBatch));
    absl::ReaderMutexLock lock(&mu);
    auto copy = [&](size_t r) ABSL_SHARED_LOCKS_REQUIRED(mu) {
      if (const float* row = table.Find(batch[r])) {
        fn(batch[r], std::span<const float>(row, width), table.IndexEntry(batch[r]));
      }
    };
    if (row_pushes_striped) {
      ForEachRowByStripe(batch, /*write=*/false, copy);
    } else {
      for (size_t r = 0; r < batch.size(); ++r) copy(r);
    }
  }
}

}  // namespace pst::ps
