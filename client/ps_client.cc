#include "client/ps_client.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/partition.h"
#include "common/sparse_gradient.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"

namespace pst::client {
namespace {

common::Shape ToShape(const std::vector<int64_t>& dims) {
  return common::Shape(dims.begin(), dims.end());
}

// InvalidArgument unless `spans` holds one span per dense variable, each of
// exactly its elements; `what` names a span ("buffer", "gradient").
template <typename Dense, typename Spans>
absl::Status CheckDenseSizes(const std::vector<Dense>& dense, const Spans& spans,
                             absl::string_view what) {
  if (spans.size() != dense.size()) {
    return absl::InvalidArgumentError(absl::StrCat(spans.size(), " ", what, "(s) for ",
                                                   dense.size(), " dense variables"));
  }
  for (size_t v = 0; v < dense.size(); ++v) {
    if (static_cast<int64_t>(spans[v].size()) != dense[v].size) {
      return absl::InvalidArgumentError(absl::StrCat(what, " for '", dense[v].name, "' holds ",
                                                     spans[v].size(), " values, expected ",
                                                     dense[v].size));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const proto::PlacementPlan& plan, const std::vector<std::string>& dense_names,
    std::shared_ptr<common::PsTransport> transport, int worker_index, uint64_t incarnation,
    int64_t request_bytes) {
  const int num_ps = transport->num_ps();
  absl::flat_hash_map<std::string, const proto::PlacementPlan::Entry*> whole;
  // Partitioned variables by logical name, each partition in its place.
  absl::flat_hash_map<std::string, std::vector<const proto::PlacementPlan::Entry*>> partitions;
  absl::flat_hash_map<std::string, Table> tables;
  for (const auto& entry : plan.variables()) {
    if (entry.ps_index() < 0 || entry.ps_index() >= num_ps) {
      return absl::FailedPreconditionError(absl::StrCat("variable '", entry.spec().name(),
                                                        "' is placed on ps ", entry.ps_index(),
                                                        " but the cluster has ", num_ps, " ps"));
    }
    const proto::VariableSpec& spec = entry.spec();
    if (spec.variable().empty()) {
      whole[spec.name()] = &entry;
      continue;
    }
    Table& table = tables[spec.variable()];
    table.name = spec.variable();
    const int parts = spec.num_partitions();
    if (parts < 1 || spec.partition() < 0 || spec.partition() >= parts ||
        spec.full_shape_size() < 1 || spec.shape_size() != spec.full_shape_size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("partition '", spec.name(), "' in the plan is malformed"));
    }
    table.rows = spec.full_shape(0);
    table.dim = 1;
    for (int d = 1; d < spec.full_shape_size(); ++d)
      table.dim *= static_cast<int>(spec.full_shape(d));
    table.routing = spec.routing();
    table.partition_names.resize(parts);
    table.partition_ps.resize(parts, -1);
    table.partition_names[spec.partition()] = spec.name();
    table.partition_ps[spec.partition()] = entry.ps_index();
    std::vector<const proto::PlacementPlan::Entry*>& held = partitions[spec.variable()];
    held.resize(parts, nullptr);
    held[spec.partition()] = &entry;
  }
  for (const auto& [name, table] : tables) {
    for (size_t p = 0; p < table.partition_ps.size(); ++p) {
      if (table.partition_ps[p] < 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("table '", name, "' has no partition ", p, " in the plan"));
      }
    }
  }
  std::vector<DenseVar> dense;
  for (const std::string& name : dense_names) {
    DenseVar var;
    var.name = name;
    if (auto it = whole.find(name); it != whole.end()) {
      const auto& shape = it->second->spec().shape();
      Piece piece{name, std::vector<int64_t>(shape.begin(), shape.end()), it->second->ps_index()};
      piece.size = *common::NumElements(shape);
      var.size = piece.size;
      var.shape = piece.shape;
      var.pieces.push_back(std::move(piece));
      dense.push_back(std::move(var));
      continue;
    }
    auto it = partitions.find(name);
    if (it == partitions.end() || tables[name].routing != proto::DIV) {
      return absl::FailedPreconditionError(absl::StrCat(
          "variable '", name, "' is neither a whole variable nor cut into 'div' pieces in the "
          "placement plan"));
    }
    // 'div' pieces are consecutive row ranges in partition order.
    int64_t rows = 0;
    for (const proto::PlacementPlan::Entry* entry : it->second) {
      const proto::VariableSpec& spec = entry->spec();
      const auto& shape = spec.shape();
      if (spec.row_offset() != rows || spec.routing() != proto::DIV ||
          !std::equal(shape.begin() + 1, shape.end(), spec.full_shape().begin() + 1,
                      spec.full_shape().end())) {
        return absl::FailedPreconditionError(
            absl::StrCat("piece '", spec.name(), "' in the plan does not continue '", name, "'"));
      }
      Piece piece{spec.name(), std::vector<int64_t>(shape.begin(), shape.end()),
                  entry->ps_index(), var.size};
      piece.size = *common::NumElements(shape);
      var.size += piece.size;
      rows += shape[0];
      var.pieces.push_back(std::move(piece));
    }
    if (rows != it->second.front()->spec().full_shape(0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the pieces of '", name, "' in the plan do not cover its rows"));
    }
    const auto& full = it->second.front()->spec().full_shape();
    var.shape.assign(full.begin(), full.end());
    tables.erase(name);  // read whole, not by rows
    dense.push_back(std::move(var));
  }
  // Each ps's pieces, in variable order, in requests of about request_bytes
  // (twice that for a share that fits in one wave of requests).
  std::vector<int64_t> share(num_ps, 0);
  for (const DenseVar& var : dense) {
    for (const Piece& piece : var.pieces) {
      share[piece.ps] += piece.size * static_cast<int64_t>(sizeof(float));
    }
  }
  std::vector<Request> requests;
  for (int ps = 0; ps < num_ps; ++ps) {
    const int64_t limit =
        share[ps] <= kRequestsInFlight * request_bytes ? 2 * request_bytes : request_bytes;
    int part = 0;
    int64_t bytes = 0;
    for (size_t v = 0; v < dense.size(); ++v) {
      for (size_t p = 0; p < dense[v].pieces.size(); ++p) {
        const Piece& piece = dense[v].pieces[p];
        if (piece.ps != ps) continue;
        const int64_t piece_bytes = piece.size * static_cast<int64_t>(sizeof(float));
        if (requests.empty() || requests.back().ps != ps ||
            (bytes > 0 && bytes + piece_bytes > limit)) {
          requests.push_back({ps, part++, {}});
          bytes = 0;
        }
        requests.back().pieces.emplace_back(static_cast<int>(v), static_cast<int>(p));
        bytes += piece_bytes;
      }
    }
  }
  return std::unique_ptr<PsClient>(new PsClient(std::move(dense), std::move(requests),
                                                std::move(tables), std::move(transport),
                                                worker_index, incarnation));
}

PsClient::PsClient(std::vector<DenseVar> dense, std::vector<Request> requests,
                   absl::flat_hash_map<std::string, Table> tables,
                   std::shared_ptr<common::PsTransport> transport, int worker_index,
                   uint64_t incarnation)
    : dense_(std::move(dense)),
      requests_(std::move(requests)),
      tables_(std::move(tables)),
      transport_(std::move(transport)),
      worker_index_(worker_index),
      incarnation_(incarnation) {}

absl::Status PsClient::FanOut(const std::vector<int>& targets,
                              const std::function<void(int, common::PsTransport::Done)>& start) {
  std::vector<absl::Status> statuses(targets.size());
  absl::BlockingCounter pending(static_cast<int>(targets.size()));
  for (size_t i = 0; i < targets.size(); ++i) {
    start(targets[i], [&statuses, &pending, i](absl::Status status) {
      statuses[i] = std::move(status);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!statuses[i].ok()) {
      return absl::Status(statuses[i].code(), absl::StrCat(transport_->Describe(targets[i]), ": ",
                                                           statuses[i].message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::RunRequests(
    const std::function<void(int, common::PsTransport::Done)>& start) {
  const int count = static_cast<int>(requests_.size());
  if (count == 0) return absl::OkStatus();
  std::vector<absl::Status> statuses(count);
  absl::BlockingCounter pending(count);
  // Requests not started yet, per ps, in order. A finished request starts
  // the next of its ps (on the thread that finished it) before it counts as
  // done, so `pending` reaches zero only once every request has run.
  absl::Mutex mu;
  std::vector<std::deque<int>> queued(transport_->num_ps());
  for (int r = 0; r < count; ++r) queued[requests_[r].ps].push_back(r);
  std::vector<int> first;
  for (std::deque<int>& q : queued) {
    for (int k = 0; k < kRequestsInFlight && !q.empty(); ++k) {
      first.push_back(q.front());
      q.pop_front();
    }
  }
  std::function<void(int)> launch = [&](int r) {
    start(r, [&, r](absl::Status status) {
      statuses[r] = std::move(status);
      int next = -1;
      {
        absl::MutexLock lock(&mu);
        std::deque<int>& q = queued[requests_[r].ps];
        if (!q.empty()) {
          next = q.front();
          q.pop_front();
        }
      }
      if (next >= 0) launch(next);
      pending.DecrementCount();
    });
  };
  for (int r : first) launch(r);
  pending.Wait();
  for (int r = 0; r < count; ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(),
                          absl::StrCat(transport_->Describe(requests_[r].ps), ": ",
                                       statuses[r].message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::CheckDense(int r, const proto::PullResponse& response,
                                  int64_t* min_version) const {
  const Request& request = requests_[r];
  const int ps = request.ps;
  const int count = static_cast<int>(request.pieces.size());
  if (response.names_size() != count || response.values_size() != count ||
      response.versions_size() != count) {
    return absl::DataLossError(absl::StrCat(transport_->Describe(ps), " answered with ",
                                            response.names_size(), " variables, asked for ",
                                            count));
  }
  for (int k = 0; k < count; ++k) {
    const auto [v, p] = request.pieces[k];
    const Piece& piece = dense_[v].pieces[p];
    if (response.names(k) != piece.name) {
      return absl::DataLossError(absl::StrCat(transport_->Describe(ps), " answered '",
                                              response.names(k), "' for '", piece.name, "'"));
    }
    // The transport put the payload in place (its size checked) and left
    // the tensor's data empty.
    const proto::Tensor& value = response.values(k);
    const auto& shape = value.shape();
    if (value.dtype() != wire_dtype_ || !value.data().empty() ||
        !std::equal(shape.begin(), shape.end(), piece.shape.begin(), piece.shape.end())) {
      return absl::DataLossError(absl::StrCat(transport_->Describe(ps), " answered '",
                                              piece.name, "' with shape ",
                                              common::ShapeString(shape), ", expected ",
                                              common::ShapeString(ToShape(piece.shape))));
    }
    *min_version = std::min(*min_version, response.versions(k));
  }
  return absl::OkStatus();
}

GradientSpans SpansOf(const Values& values) {
  return GradientSpans(values.begin(), values.end());
}

std::vector<PsClient::DenseInfo> PsClient::DenseVariables() const {
  std::vector<DenseInfo> out;
  for (const DenseVar& var : dense_) out.push_back({var.name, var.shape});
  return out;
}

ValueSpans PsClient::Resized(Values* values) const {
  values->resize(dense_.size());
  ValueSpans spans;
  for (size_t v = 0; v < dense_.size(); ++v) {
    (*values)[v].resize(dense_[v].size);
    spans.emplace_back((*values)[v]);
  }
  return spans;
}

absl::StatusOr<std::vector<common::DenseBuffers>> PsClient::ValueBuffers(
    const ValueSpans& values) const {
  PST_RETURN_IF_ERROR(CheckDenseSizes(dense_, values, "buffer"));
  std::vector<common::DenseBuffers> buffers(requests_.size());
  for (size_t r = 0; r < requests_.size(); ++r) {
    for (const auto& [v, p] : requests_[r].pieces) {
      const Piece& piece = dense_[v].pieces[p];
      buffers[r].values.push_back(values[v].subspan(piece.offset, piece.size));
    }
  }
  return buffers;
}

absl::StatusOr<int64_t> PsClient::Pull(Values* values) { return Pull(Resized(values)); }

absl::StatusOr<int64_t> PsClient::Pull(const ValueSpans& values) {
  const int count = static_cast<int>(requests_.size());
  std::vector<proto::PullRequest> pulls(count);
  std::vector<proto::PullResponse> responses(count);
  PST_ASSIGN_OR_RETURN(const std::vector<common::DenseBuffers> buffers, ValueBuffers(values));
  for (int r = 0; r < count; ++r) {
    pulls[r].set_worker_index(worker_index_);
    pulls[r].set_wire_dtype(wire_dtype_);
    for (const auto& [v, p] : requests_[r].pieces) pulls[r].add_names(dense_[v].pieces[p].name);
  }
  PST_RETURN_IF_ERROR(RunRequests([&](int r, common::PsTransport::Done done) {
    transport_->PullDense(requests_[r].ps, &pulls[r], &buffers[r], &responses[r], std::move(done));
  }));
  int64_t min_version = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < count; ++r) PST_RETURN_IF_ERROR(CheckDense(r, responses[r], &min_version));
  wire_bytes_.pulled += DensePayloadBytes();
  return count == 0 ? 0 : min_version;
}

void PsClient::set_generation(int64_t generation) {
  if (generation != generation_) {
    for (auto& r : residual_) std::fill(r.begin(), r.end(), 0.0f);
  }
  generation_ = generation;
}

void PsClient::set_topk_ratio(double ratio) {
  topk_ratio_ = ratio > 0 && ratio <= 1 ? ratio : 0;
  residual_.clear();
  next_residual_.clear();
  compressed_.clear();
  if (topk_ratio_ == 0) return;
  for (const DenseVar& var : dense_) {
    residual_.emplace_back(var.size, 0.0f);
    next_residual_.emplace_back(var.size, 0.0f);
    compressed_.emplace_back(var.pieces.size());
  }
}

int64_t PsClient::Compress(const GradientSpans& grads) {
  int64_t bytes = 0;
  for (size_t v = 0; v < dense_.size(); ++v) {
    for (size_t p = 0; p < dense_[v].pieces.size(); ++p) {
      const Piece& piece = dense_[v].pieces[p];
      common::CompressTopK(grads[v].subspan(piece.offset, piece.size),
                           std::span<const float>(residual_[v]).subspan(piece.offset, piece.size),
                           common::TopKCount(piece.size, topk_ratio_),
                           std::span<float>(next_residual_[v]).subspan(piece.offset, piece.size),
                           &compressed_[v][p]);
      bytes += static_cast<int64_t>(compressed_[v][p].size() * sizeof(float));
    }
  }
  return bytes;
}

absl::StatusOr<int64_t> PsClient::PreparePush(const GradientSpans& grads) {
  PST_RETURN_IF_ERROR(CheckDenseSizes(dense_, grads, "gradient"));
  if (topk_ratio_ > 0) return Compress(grads);
  return DensePayloadBytes();
}

int64_t PsClient::DensePayloadBytes() const {
  int64_t elements = 0;
  for (const DenseVar& var : dense_) elements += var.size;
  return elements * static_cast<int64_t>(common::WireElementBytes(wire_dtype_));
}

absl::Status PsClient::BuildPushes(int64_t step, int64_t base_version, const GradientSpans& grads,
                                   int64_t position,
                                   const std::function<proto::PushRequest*(int r)>& request,
                                   common::PayloadPins* pins,
                                   std::vector<common::DenseBuffers>* buffers) const {
  buffers->resize(requests_.size());
  for (int r = 0; r < static_cast<int>(requests_.size()); ++r) {
    proto::PushRequest* push = request(r);
    (*buffers)[r].pins = pins;
    push->set_worker_index(worker_index_);
    push->set_incarnation(incarnation_);
    push->set_generation(generation_);
    push->set_step(step);
    push->set_base_version(base_version);
    push->set_position(position);
    push->set_part(requests_[r].part);
    push->set_wire_dtype(wire_dtype_);
    for (const auto& [v, p] : requests_[r].pieces) {
      const Piece& piece = dense_[v].pieces[p];
      push->add_names(piece.name);
      // The header here; the payload travels from `grads` itself (or from
      // its top-k entries, compressed_).
      proto::Tensor* gradient = push->add_gradients();
      gradient->mutable_shape()->Assign(piece.shape.begin(), piece.shape.end());
      if (topk_ratio_ > 0) {
        gradient->set_dtype(proto::DT_SPARSE_FLOAT32);
        (*buffers)[r].gradients.push_back(compressed_[v][p]);
      } else {
        gradient->set_dtype(wire_dtype_);
        (*buffers)[r].gradients.push_back(grads[v].subspan(piece.offset, piece.size));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsClient::PushPull(int64_t step, int64_t base_version, const Values& grads,
                                           Values* values, int64_t position) {
  return PushPull(step, base_version, SpansOf(grads), Resized(values), position);
}

absl::StatusOr<int64_t> PsClient::PushPull(int64_t step, int64_t base_version,
                                           const GradientSpans& grads, const ValueSpans& values,
                                           int64_t position) {
  const int count = static_cast<int>(requests_.size());
  std::vector<proto::PushPullRequest> pushes(count);
  std::vector<proto::PullResponse> responses(count);
  PST_ASSIGN_OR_RETURN(std::vector<common::DenseBuffers> buffers, ValueBuffers(values));
  PST_ASSIGN_OR_RETURN(const int64_t push_bytes, PreparePush(grads));
  common::PayloadPins pins;  // the caller's grads stay untouched until released
  PST_RETURN_IF_ERROR(BuildPushes(
      step, base_version, grads, position, [&](int r) { return pushes[r].mutable_push(); },
      &pins, &buffers));
  absl::Status sent = RunRequests([&](int r, common::PsTransport::Done done) {
    transport_->PushPullDense(requests_[r].ps, &pushes[r], &buffers[r], &responses[r],
                              std::move(done));
  });
  pins.WaitAllReleased();
  PST_RETURN_IF_ERROR(sent);
  int64_t min_version = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < count; ++r) PST_RETURN_IF_ERROR(CheckDense(r, responses[r], &min_version));
  if (topk_ratio_ > 0) residual_.swap(next_residual_);  // the push is in
  wire_bytes_.pushed += push_bytes;
  wire_bytes_.pulled += DensePayloadBytes();
  return count == 0 ? 0 : min_version;
}

absl::StatusOr<int64_t> PsClient::Push(int64_t step, int64_t base_version, const Values& grads,
                                       int64_t position) {
  const int count = static_cast<int>(requests_.size());
  std::vector<proto::PushRequest> pushes(count);
  std::vector<proto::PushResponse> responses(count);
  std::vector<common::DenseBuffers> buffers;
  PST_ASSIGN_OR_RETURN(const int64_t push_bytes, PreparePush(SpansOf(grads)));
  common::PayloadPins pins;
  PST_RETURN_IF_ERROR(BuildPushes(step, base_version, SpansOf(grads), position,
                                  [&](int r) { return &pushes[r]; }, &pins, &buffers));
  absl::Status sent = RunRequests([&](int r, common::PsTransport::Done done) {
    transport_->PushDense(requests_[r].ps, &pushes[r], &buffers[r], &responses[r],
                          std::move(done));
  });
  pins.WaitAllReleased();
  PST_RETURN_IF_ERROR(sent);
  if (topk_ratio_ > 0) residual_.swap(next_residual_);
  wire_bytes_.pushed += push_bytes;
  int64_t min_version = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < count; ++r) {
    for (int64_t version : responses[r].versions()) min_version = std::min(min_version, version);
  }
  return count == 0 || min_version == std::numeric_limits<int64_t>::max() ? 0 : min_version;
}

absl::StatusOr<const PsClient::Table*> PsClient::FindTable(const std::string& name) const {
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("no partitioned table '", name, "' in the plan"));
  }
  return &it->second;
}

absl::StatusOr<int> PsClient::TableDim(const std::string& table) const {
  absl::StatusOr<const Table*> t = FindTable(table);
  if (!t.ok()) return t.status();
  return (*t)->dim;
}

std::vector<std::string> PsClient::TableNames() const {
  std::vector<std::string> names;
  for (const auto& [name, table] : tables_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<PsClient::Routed> PsClient::Route(const Table& table,
                                                 std::span<const int64_t> ids) const {
  Routed routed;
  common::UniqueIds(ids.data(), static_cast<int64_t>(ids.size()), &routed.unique, &routed.index);
  const int parts = static_cast<int>(table.partition_names.size());
  routed.partition.resize(routed.unique.size());
  for (size_t u = 0; u < routed.unique.size(); ++u) {
    const int64_t id = routed.unique[u];
    if (table.routing == proto::HASH) {
      routed.partition[u] = common::HashPartition(id, parts);
      continue;
    }
    absl::StatusOr<common::RowLocation> where =
        common::RouteId(id, table.rows, parts, table.routing);
    if (!where.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", table.name, "': ", where.status().message()));
    }
    routed.partition[u] = where->partition;
  }
  return routed;
}

absl::Status PsClient::PullRows(std::span<const TableIds> tables, Values* out) {
  out->resize(tables.size());
  ValueSpans spans;
  for (size_t k = 0; k < tables.size(); ++k) {
    absl::StatusOr<int> dim = TableDim(tables[k].table);
    if (!dim.ok()) return dim.status();
    (*out)[k].resize(tables[k].ids.size() * *dim);
    spans.emplace_back((*out)[k]);
  }
  return PullRows(tables, spans);
}

absl::Status PsClient::PullRows(std::span<const TableIds> tables, const ValueSpans& out) {
  if (out.size() != tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull of rows into ", out.size(), " buffers for ", tables.size(), " tables"));
  }
  const int n = transport_->num_ps();
  std::vector<proto::PullRowsRequest> requests(n);
  std::vector<proto::PullRowsResponse> responses(n);
  // For each table and unique id: (ps, entry in that ps's request, row in it).
  struct Slot {
    int ps, entry;
    int64_t row;
  };
  std::vector<Routed> routed(tables.size());
  std::vector<std::vector<Slot>> slots(tables.size());
  std::vector<const Table*> found(tables.size());
  for (size_t k = 0; k < tables.size(); ++k) {
    absl::StatusOr<const Table*> table = FindTable(tables[k].table);
    if (!table.ok()) return table.status();
    found[k] = *table;
    if (out[k].size() != tables[k].ids.size() * (*table)->dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer for rows of table '", tables[k].table, "' holds ", out[k].size(),
                       " values, expected ", tables[k].ids.size(), " rows of ", (*table)->dim));
    }
    absl::StatusOr<Routed> r = Route(**table, tables[k].ids);
    if (!r.ok()) return r.status();
    routed[k] = *std::move(r);
    // One RowIds entry per touched partition.
    std::vector<int> entry_of(found[k]->partition_names.size(), -1);
    for (size_t u = 0; u < routed[k].unique.size(); ++u) {
      const int p = routed[k].partition[u];
      const int ps = found[k]->partition_ps[p];
      if (entry_of[p] < 0) {
        entry_of[p] = requests[ps].rows_size();
        requests[ps].add_rows()->set_name(found[k]->partition_names[p]);
      }
      proto::RowIds* ids = requests[ps].mutable_rows(entry_of[p]);
      slots[k].push_back({ps, entry_of[p], ids->ids_size()});
      ids->add_ids(routed[k].unique[u]);
    }
  }
  std::vector<int> targets;
  for (int ps = 0; ps < n; ++ps) {
    if (requests[ps].rows_size() > 0) targets.push_back(ps);
  }
  absl::Status status = FanOut(targets, [&](int ps, common::PsTransport::Done done) {
    transport_->PullRows(ps, &requests[ps], &responses[ps], std::move(done));
  });
  if (!status.ok()) return status;
  for (int ps : targets) {
    if (responses[ps].values_size() != requests[ps].rows_size()) {
      return absl::DataLossError(absl::StrCat(transport_->Describe(ps), " answered ",
                                              responses[ps].values_size(), " tensors for ",
                                              requests[ps].rows_size(), " row sets"));
    }
    for (int e = 0; e < requests[ps].rows_size(); ++e) {
      const proto::Tensor& t = responses[ps].values(e);
      const int64_t want = static_cast<int64_t>(requests[ps].rows(e).ids_size());
      if (t.dtype() != proto::DT_FLOAT32 || t.shape_size() != 2 || t.shape(0) != want ||
          t.data().size() % sizeof(float) != 0 ||
          static_cast<int64_t>(t.data().size()) != t.shape(0) * t.shape(1) * 4) {
        return absl::DataLossError(absl::StrCat(transport_->Describe(ps), " answered rows of '",
                                                requests[ps].rows(e).name(), "' with shape ",
                                                common::ShapeString(t.shape())));
      }
    }
  }
  for (size_t k = 0; k < tables.size(); ++k) {
    const int dim = found[k]->dim;
    std::vector<float> unique_rows(routed[k].unique.size() * dim);
    for (size_t u = 0; u < slots[k].size(); ++u) {
      const Slot& s = slots[k][u];
      const proto::Tensor& t = responses[s.ps].values(s.entry);
      if (t.shape(1) != dim) {
        return absl::DataLossError(absl::StrCat("rows of '", found[k]->name, "' have width ",
                                                t.shape(1), ", expected ", dim));
      }
      std::memcpy(&unique_rows[u * dim], t.data().data() + s.row * dim * sizeof(float),
                  dim * sizeof(float));
    }
    const std::span<float> rows = out[k];
    for (size_t i = 0; i < tables[k].ids.size(); ++i) {
      std::memcpy(&rows[i * dim], &unique_rows[routed[k].index[i] * dim], dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::PushRows(int64_t step, std::span<const TableIds> tables,
                                const Values& grads) {
  return PushRows(step, tables, SpansOf(grads));
}

absl::Status PsClient::PushRows(int64_t step, std::span<const TableIds> tables,
                                const GradientSpans& grads) {
  if (grads.size() != tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradient sets for ", tables.size(), " tables"));
  }
  const int n = transport_->num_ps();
  std::vector<proto::PushRowsRequest> requests(n);
  std::vector<proto::PushRowsResponse> responses(n);
  // Per ps and entry: the gradient rows, in the order of that entry's ids.
  std::vector<std::vector<std::vector<float>>> payload(n);
  for (size_t k = 0; k < tables.size(); ++k) {
    absl::StatusOr<const Table*> table = FindTable(tables[k].table);
    if (!table.ok()) return table.status();
    const int dim = (*table)->dim;
    if (grads[k].size() != tables[k].ids.size() * dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient for table '", tables[k].table, "' has ", grads[k].size(),
                       " values, expected ", tables[k].ids.size(), " rows of ", dim));
    }
    absl::StatusOr<Routed> routed = Route(**table, tables[k].ids);
    if (!routed.ok()) return routed.status();
    // Sum the gradients of duplicate ids.
    std::vector<float> summed(routed->unique.size() * dim, 0.0f);
    for (size_t i = 0; i < tables[k].ids.size(); ++i) {
      float* dst = &summed[routed->index[i] * dim];
      const float* src = &grads[k][i * dim];
      for (int d = 0; d < dim; ++d) dst[d] += src[d];
    }
    std::vector<int> entry_of((*table)->partition_names.size(), -1);
    for (size_t u = 0; u < routed->unique.size(); ++u) {
      const int p = routed->partition[u];
      const int ps = (*table)->partition_ps[p];
      if (entry_of[p] < 0) {
        entry_of[p] = requests[ps].rows_size();
        requests[ps].add_rows()->set_name((*table)->partition_names[p]);
        payload[ps].emplace_back();
      }
      requests[ps].mutable_rows(entry_of[p])->add_ids(routed->unique[u]);
      std::vector<float>& rows = payload[ps][entry_of[p]];
      rows.insert(rows.end(), &summed[u * dim], &summed[u * dim] + dim);
    }
    for (size_t p = 0; p < entry_of.size(); ++p) {
      if (entry_of[p] < 0) continue;
      const int ps = (*table)->partition_ps[p];
      // Tensors are added in entry order; fill placeholders up to this one.
      while (requests[ps].gradients_size() <= entry_of[p]) requests[ps].add_gradients();
      const int64_t count = requests[ps].rows(entry_of[p]).ids_size();
      common::PackFloats(payload[ps][entry_of[p]], ToShape({count, int64_t{dim}}),
                         requests[ps].mutable_gradients(entry_of[p]));
    }
  }
  if (sync_) {
    // Every partition of every table hears of this push, with no ids where
    // it has none (see PushRows), in name order.
    std::vector<const Table*> all;
    for (const auto& [name, table] : tables_) all.push_back(&table);
    std::sort(all.begin(), all.end(),
              [](const Table* a, const Table* b) { return a->name < b->name; });
    std::vector<absl::flat_hash_set<std::string>> listed(n);
    for (int ps = 0; ps < n; ++ps) {
      for (const proto::RowIds& ids : requests[ps].rows()) listed[ps].insert(ids.name());
    }
    for (const Table* table : all) {
      for (size_t p = 0; p < table->partition_names.size(); ++p) {
        const int ps = table->partition_ps[p];
        if (!listed[ps].insert(table->partition_names[p]).second) continue;
        requests[ps].add_rows()->set_name(table->partition_names[p]);
        common::PackFloats(std::vector<float>(), ToShape({0, int64_t{table->dim}}),
                           requests[ps].add_gradients());
      }
    }
  }
  std::vector<int> targets;
  for (int ps = 0; ps < n; ++ps) {
    if (requests[ps].rows_size() == 0) continue;
    targets.push_back(ps);
    requests[ps].set_worker_index(worker_index_);
    requests[ps].set_incarnation(incarnation_);
    requests[ps].set_generation(generation_);
    requests[ps].set_step(step);
  }
  return FanOut(targets, [&](int ps, common::PsTransport::Done done) {
    transport_->PushRows(ps, &requests[ps], &responses[ps], std::move(done));
  });
}

}  // namespace pst::client
