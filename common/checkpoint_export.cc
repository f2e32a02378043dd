#include "common/checkpoint_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "common/optimizer_config.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.pb.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;
using common::ShardRecord;

// Everything read from one checkpoint, checked.
struct LoadedCheckpoint {
  std::string dir;
  proto::CheckpointManifest manifest;
  std::vector<std::string> shard_paths;
  std::vector<std::vector<ShardRecord>> shards;  // per entry of manifest.shards
};

// One logical variable: its records (partitions) and how they merge.
struct LogicalVariable {
  std::string name;
  bool hash = false;
  std::vector<int64_t> shape;  // the whole tensor (hash: [ids, dim...])
  int64_t dim = 1;             // elements per row (rank 0: the one element)
  int num_slots = 0;
  // Its slots' names, by its own optimizer (its spec's, or the job's).
  std::vector<std::string> slot_names;
  std::vector<const ShardRecord*> parts;
  // Hash tables: each row as (id, part, local row), ascending by id.
  struct HashRow {
    int64_t id;
    int part;
    int64_t local;
  };
  std::vector<HashRow> hash_rows;
};

enum class Dtype { kI64, kF32 };

// One tensor of the file: what it is, where its bytes come from.
struct OutputTensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  const LogicalVariable* var = nullptr;
  int source = kValues;  // kValues, kIds, or a slot index
  uint64_t begin = 0;    // offset in the data section

  static constexpr int kValues = -1;
  static constexpr int kIds = -2;
};

std::string ErrnoString(int err) { return std::strerror(err); }

const std::string& LogicalName(const proto::VariableSpec& spec) {
  return spec.variable().empty() ? spec.name() : spec.variable();
}

// Product of shape[1:] (1 for ranks 0 and 1); an error on overflow.
absl::StatusOr<int64_t> RowElements(const google::protobuf::RepeatedField<int64_t>& shape) {
  common::Shape rest;
  for (int i = 1; i < shape.size(); ++i) rest.Add(shape[i]);
  return common::NumElements(rest);
}

std::vector<int64_t> ToVector(const google::protobuf::RepeatedField<int64_t>& shape) {
  return std::vector<int64_t>(shape.begin(), shape.end());
}

// Slot names of `optimizer`'s `count` slots, in the order the ps keeps
// them (common::OptimizerSlotNames); indices for anything else.
std::vector<std::string> SlotNames(const proto::OptimizerConfig& optimizer, int count) {
  std::vector<std::string> names = OptimizerSlotNames(optimizer);
  if (static_cast<int>(names.size()) == count) return names;
  names.clear();
  for (int i = 0; i < count; ++i) names.push_back(absl::StrCat(i));
  return names;
}

// ---------------------------------------------------------------------------
// Reading.

// Checks `dir` (manifest against shards, every checksum, along its chain),
// then reads it: an incremental checkpoint as its chain folded into the
// records a full one would hold (common::FoldLink).
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& dir) {
  PST_RETURN_IF_ERROR(common::InspectCheckpoint(dir).status());
  PST_ASSIGN_OR_RETURN(const std::vector<std::string> chain, common::CheckpointChain(dir));
  LoadedCheckpoint ckpt;
  ckpt.dir = dir;
  for (const std::string& link : chain) {
    PST_ASSIGN_OR_RETURN(ckpt.manifest, common::ReadManifest(link));
    const bool first = link == chain.front();
    for (int i = 0; i < ckpt.manifest.shards_size(); ++i) {
      // InspectCheckpoint has checked the name is a plain file name, and
      // that every link has as many shards.
      std::string path = (fs::path(link) / ckpt.manifest.shards(i).file()).string();
      PST_ASSIGN_OR_RETURN(std::vector<ShardRecord> records, common::ReadShardFile(path));
      if (first) {
        ckpt.shard_paths.push_back(std::move(path));
        ckpt.shards.push_back(std::move(records));
      } else {
        PST_RETURN_IF_ERROR(common::FoldLink(&ckpt.shards[i], std::move(records), path));
      }
    }
  }
  return ckpt;
}

// ---------------------------------------------------------------------------
// Merging.

// Checks that `v.parts` (partitions of a MOD or DIV variable) make up the
// whole variable, each global row exactly once, and fills shape and dim.
// Marks partition s.partition() of `np` as seen; what is wrong with it
// (outside [0, np), or seen before), or "" when nothing is.
std::string ClaimPartition(const proto::VariableSpec& s, int np, std::vector<bool>* seen) {
  if (s.partition() < 0 || s.partition() >= np) {
    return absl::StrCat("partition '", s.name(), "' has index ", s.partition(), ", outside [0, ",
                        np, ")");
  }
  if ((*seen)[s.partition()]) return absl::StrCat("partition ", s.partition(), " is saved twice");
  (*seen)[s.partition()] = true;
  return "";
}

absl::Status PlanRangeVariable(LogicalVariable& v, const std::string& dir) {
  auto loss = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", dir, ": variable '", v.name, "': ", why));
  };
  const proto::VariableSpec& first = v.parts[0]->spec;
  const int np = first.num_partitions();
  if (first.full_shape_size() < 1 || first.full_shape(0) < 1 || np < 1) {
    return loss(absl::StrCat("partition '", first.name(), "' has full_shape ",
                             common::ShapeString(first.full_shape()), " and ", np, " partitions"));
  }
  absl::StatusOr<int64_t> full = common::NumElements(first.full_shape());
  absl::StatusOr<int64_t> dim = RowElements(first.full_shape());
  if (!full.ok() || !dim.ok()) {
    return loss(absl::StrCat("full_shape ", common::ShapeString(first.full_shape()), ": ",
                             (full.ok() ? dim.status() : full.status()).message()));
  }
  const int64_t n = first.full_shape(0);
  std::vector<bool> seen_part(static_cast<size_t>(np), false);
  std::vector<bool> filled(static_cast<size_t>(n), false);
  int64_t count = 0;
  for (const ShardRecord* r : v.parts) {
    const proto::VariableSpec& s = r->spec;
    if (s.routing() != first.routing() || s.num_partitions() != np ||
        ToVector(s.full_shape()) != ToVector(first.full_shape())) {
      return loss(absl::StrCat(
          "partition '", s.name(), "' (", proto::Routing_Name(s.routing()), ", ",
          s.num_partitions(), " partitions, full_shape ", common::ShapeString(s.full_shape()),
          ") disagrees with '", first.name(), "' (", proto::Routing_Name(first.routing()), ", ", np,
          " partitions, full_shape ", common::ShapeString(first.full_shape()), ")"));
    }
    if (const std::string bad = ClaimPartition(s, np, &seen_part); !bad.empty()) return loss(bad);
    absl::StatusOr<int64_t> part_dim = RowElements(s.shape());
    if (!part_dim.ok() || *part_dim != *dim) {
      return loss(absl::StrCat("partition '", s.name(), "' has shape ",
                               common::ShapeString(s.shape()), ", rows unlike full_shape ",
                               common::ShapeString(first.full_shape())));
    }
    // Local rows [0, rows) map to global rows offset + k * stride: all of
    // them must fall in [0, n) (checked without overflow).
    if (r->rows > 0 && (s.row_stride() < 1 || s.row_offset() < 0 || s.row_offset() >= n ||
                        (r->rows - 1) > (n - 1 - s.row_offset()) / s.row_stride())) {
      return loss(absl::StrCat("partition '", s.name(), "' has ", r->rows, " rows at row_offset ",
                               s.row_offset(), " and row_stride ", s.row_stride(),
                               ", which do not fit in the ", n, " rows"));
    }
    for (int64_t k = 0; k < r->rows; ++k) {
      const int64_t g = s.row_offset() + k * s.row_stride();
      if (filled[g]) {
        return loss(absl::StrCat("global row ", g, " is held by two partitions"));
      }
      filled[g] = true;
      ++count;
    }
  }
  if (count != n) {
    const int64_t missing = std::find(filled.begin(), filled.end(), false) - filled.begin();
    return loss(absl::StrCat("the partitions hold ", count, " of its ", n, " rows (global row ",
                             missing, " is in none)"));
  }
  v.shape = ToVector(first.full_shape());
  v.dim = *dim;
  return absl::OkStatus();
}

// Checks the partitions of a hash table (ids unique over all of them) and
// orders its rows by id.
absl::Status PlanHashTable(LogicalVariable& v, const std::string& dir) {
  auto loss = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", dir, ": hash table '", v.name, "': ", why));
  };
  const proto::VariableSpec& first = v.parts[0]->spec;
  const int np = std::max(1, first.num_partitions());
  absl::StatusOr<int64_t> dim = RowElements(first.shape());
  if (first.shape_size() < 1 || !dim.ok()) {
    return loss(absl::StrCat("bad shape ", common::ShapeString(first.shape())));
  }
  std::vector<bool> seen_part(static_cast<size_t>(np), false);
  size_t total = 0;
  for (const ShardRecord* r : v.parts) {
    const proto::VariableSpec& s = r->spec;
    if (s.routing() != proto::HASH || std::max(1, s.num_partitions()) != np) {
      return loss(absl::StrCat("partition '", s.name(), "' (", proto::Routing_Name(s.routing()),
                               ", ", s.num_partitions(), " partitions) disagrees with '",
                               first.name(), "' (HASH, ", np, " partitions)"));
    }
    const std::vector<int64_t> rest(s.shape().begin() + std::min(1, s.shape_size()),
                                    s.shape().end());
    const std::vector<int64_t> first_rest(first.shape().begin() + 1, first.shape().end());
    if (rest != first_rest) {
      return loss(absl::StrCat("partition '", s.name(), "' has shape ",
                               common::ShapeString(s.shape()), ", unlike '", first.name(), "' (",
                               common::ShapeString(first.shape()), ")"));
    }
    if (const std::string bad = ClaimPartition(s, np, &seen_part); !bad.empty()) return loss(bad);
    total += r->hash_ids.size();
  }
  v.hash_rows.reserve(total);
  for (int p = 0; p < static_cast<int>(v.parts.size()); ++p) {
    const std::vector<int64_t>& ids = v.parts[p]->hash_ids;
    for (int64_t k = 0; k < static_cast<int64_t>(ids.size()); ++k) {
      v.hash_rows.push_back({ids[k], p, k});
    }
  }
  std::sort(v.hash_rows.begin(), v.hash_rows.end(),
            [](const LogicalVariable::HashRow& a, const LogicalVariable::HashRow& b) {
              return a.id < b.id;
            });
  for (size_t i = 1; i < v.hash_rows.size(); ++i) {
    if (v.hash_rows[i].id == v.hash_rows[i - 1].id) {
      return loss(absl::StrCat("id ", v.hash_rows[i].id, " is saved twice (in '",
                               v.parts[v.hash_rows[i - 1].part]->spec.name(), "' and '",
                               v.parts[v.hash_rows[i].part]->spec.name(), "')"));
    }
  }
  v.shape = {static_cast<int64_t>(v.hash_rows.size())};
  v.shape.insert(v.shape.end(), first.shape().begin() + 1, first.shape().end());
  v.dim = *dim;
  return absl::OkStatus();
}

// Groups the records of `ckpt` by logical variable and checks that each
// group makes up its variable. Variables come back sorted by name.
absl::StatusOr<std::vector<LogicalVariable>> PlanVariables(const LoadedCheckpoint& ckpt) {
  const std::string& dir = ckpt.dir;
  std::map<std::string, LogicalVariable> by_name;
  std::map<std::string, std::string> record_file;  // record name -> its shard
  for (size_t i = 0; i < ckpt.shards.size(); ++i) {
    for (const ShardRecord& r : ckpt.shards[i]) {
      auto [it, inserted] = record_file.emplace(r.spec.name(), ckpt.shard_paths[i]);
      if (!inserted) {
        return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": '", r.spec.name(),
                                                "' is saved twice, in ", it->second, " and ",
                                                ckpt.shard_paths[i]));
      }
      LogicalVariable& v = by_name[LogicalName(r.spec)];
      v.name = LogicalName(r.spec);
      v.parts.push_back(&r);
    }
  }
  for (const proto::PlacementPlan::Entry& entry : ckpt.manifest.plan().variables()) {
    if (!record_file.contains(entry.spec().name())) {
      return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": the manifest's plan places '",
                                              entry.spec().name(), "' on ps ", entry.ps_index(),
                                              ", but no shard holds it"));
    }
  }

  std::vector<LogicalVariable> vars;
  for (auto& [name, v] : by_name) {
    std::sort(v.parts.begin(), v.parts.end(), [](const ShardRecord* a, const ShardRecord* b) {
      return a->spec.partition() < b->spec.partition();
    });
    const ShardRecord& first = *v.parts[0];
    for (const ShardRecord* r : v.parts) {
      if (r->slots.size() != first.slots.size()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": variable '", name,
                                                "': partition '", r->spec.name(), "' has ",
                                                r->slots.size(), " optimizer slot(s), '",
                                                first.spec.name(), "' has ", first.slots.size()));
      }
    }
    v.num_slots = static_cast<int>(first.slots.size());
    v.slot_names = SlotNames(
        first.spec.has_optimizer() ? first.spec.optimizer() : ckpt.manifest.training().optimizer(),
        v.num_slots);
    switch (first.spec.routing()) {
      case proto::HASH:
        v.hash = true;
        PST_RETURN_IF_ERROR(PlanHashTable(v, dir));
        break;
      case proto::MOD:
      case proto::DIV:
        PST_RETURN_IF_ERROR(PlanRangeVariable(v, dir));
        break;
      default: {  // A whole variable.
        if (v.parts.size() != 1 || first.spec.routing() != proto::ROUTING_NONE) {
          return absl::DataLossError(
              absl::StrCat("checkpoint ", dir, ": variable '", name, "' has ", v.parts.size(),
                           " record(s) with routing ", proto::Routing_Name(first.spec.routing()),
                           "; a whole variable has one with routing ROUTING_NONE"));
        }
        absl::StatusOr<int64_t> elements = common::NumElements(first.spec.shape());
        absl::StatusOr<int64_t> dim = RowElements(first.spec.shape());
        if (!elements.ok() || !dim.ok() ||
            static_cast<uint64_t>(*elements) != first.values.size()) {
          return absl::DataLossError(absl::StrCat(
              "checkpoint ", dir, ": variable '", name, "' has shape ",
              common::ShapeString(first.spec.shape()), " but ", first.values.size(), " values"));
        }
        v.shape = ToVector(first.spec.shape());
        v.dim = *dim;
        break;
      }
    }
    vars.push_back(std::move(v));
  }
  return vars;
}

// The tensors of the file, in data order, with their offsets.
absl::StatusOr<std::vector<OutputTensor>> PlanTensors(const std::vector<LogicalVariable>& vars,
                                                      const ExportOptions& options) {
  std::vector<OutputTensor> tensors;
  for (const LogicalVariable& v : vars) {
    auto add = [&](std::string name, Dtype dtype, std::vector<int64_t> shape, int source) {
      OutputTensor t;
      t.name = std::move(name);
      t.dtype = dtype;
      t.shape = std::move(shape);
      t.var = &v;
      t.source = source;
      tensors.push_back(std::move(t));
    };
    const std::string values = v.hash ? absl::StrCat(v.name, ".values") : v.name;
    if (v.hash) {
      add(absl::StrCat(v.name, ".ids"), Dtype::kI64, {v.shape[0]}, OutputTensor::kIds);
    }
    add(values, Dtype::kF32, v.shape, OutputTensor::kValues);
    if (options.include_slots) {
      for (int s = 0; s < v.num_slots; ++s) {
        add(absl::StrCat(v.name, "/", v.slot_names[s]), Dtype::kF32, v.shape, s);
      }
    }
  }
  std::set<std::string> names = {"__metadata__"};
  for (const OutputTensor& t : tensors) {
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two tensors would be named '", t.name,
                       "' in the export (a variable's name clashes with a hash table's '.ids'/"
                       "'.values' or a slot's '/<slot>' name, or with '__metadata__')"));
    }
  }
  // The reference layout: largest element first, then by name.
  std::sort(tensors.begin(), tensors.end(), [](const OutputTensor& a, const OutputTensor& b) {
    if (a.dtype != b.dtype) return a.dtype == Dtype::kI64;
    return a.name < b.name;
  });
  uint64_t offset = 0;
  for (OutputTensor& t : tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);  // Checked when planned.
    t.bytes = elements * (t.dtype == Dtype::kI64 ? sizeof(int64_t) : sizeof(float));
    t.begin = offset;
    offset += t.bytes;
  }
  return tensors;
}

// The header: JSON padded with spaces to a multiple of 8 bytes.
std::string MakeHeader(const std::vector<OutputTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  for (const OutputTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype == Dtype::kI64 ? "I64" : "F32"},
        {"shape", t.shape},
        {"data_offsets", {t.begin, t.begin + t.bytes}},
    };
  }
  header["__metadata__"] = metadata;
  // Invalid UTF-8 (a name from a corrupt-but-checksummed file, a path) is
  // replaced rather than thrown on.
  std::string json = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  json.append((8 - json.size() % 8) % 8, ' ');
  return json;
}

// The bytes of tensor `t`.
std::string TensorBytes(const OutputTensor& t) {
  const LogicalVariable& v = *t.var;
  std::string out(t.bytes, '\0');
  if (t.source == OutputTensor::kIds) {
    char* dst = out.data();
    for (const LogicalVariable::HashRow& row : v.hash_rows) {
      std::memcpy(dst, &row.id, sizeof(row.id));
      dst += sizeof(row.id);
    }
    return out;
  }
  auto source = [&](const ShardRecord* r) -> const std::vector<float>& {
    return t.source == OutputTensor::kValues ? r->values : r->slots[t.source];
  };
  const size_t row_bytes = static_cast<size_t>(v.dim) * sizeof(float);
  if (v.hash) {
    char* dst = out.data();
    for (const LogicalVariable::HashRow& row : v.hash_rows) {
      std::memcpy(dst, source(v.parts[row.part]).data() + row.local * v.dim, row_bytes);
      dst += row_bytes;
    }
    return out;
  }
  for (const ShardRecord* r : v.parts) {
    const std::vector<float>& src = source(r);
    if (r->spec.routing() == proto::ROUTING_NONE) {
      if (!src.empty()) std::memcpy(out.data(), src.data(), src.size() * sizeof(float));
      continue;
    }
    for (int64_t k = 0; k < r->rows; ++k) {
      const int64_t g = r->spec.row_offset() + k * r->spec.row_stride();
      std::memcpy(out.data() + g * row_bytes, src.data() + k * v.dim, row_bytes);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Writing.

// A file written to "<path>.tmp" and renamed to `path` on Commit; removed
// if destroyed before that. Not thread-safe.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  absl::Status Open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Error("create", tmp_, errno);
    return absl::OkStatus();
  }

  absl::Status Append(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Error("write", tmp_, errno);
      data.remove_prefix(static_cast<size_t>(n));
      written_ += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  // fsync, close, rename into place, fsync the directory.
  absl::Status Commit() {
    if (::fsync(fd_) != 0) return Error("fsync", tmp_, errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Error("close", tmp_, errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return Error("rename to " + path_, tmp_, errno);
    }
    committed_ = true;
    const std::string parent = fs::path(path_).parent_path().string();
    const std::string dir = parent.empty() ? std::string(".") : parent;
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return Error("open directory", dir, errno);
    const int err = ::fsync(dfd) != 0 ? errno : 0;
    ::close(dfd);
    if (err != 0) return Error("fsync directory", dir, err);
    return absl::OkStatus();
  }

  uint64_t written() const { return written_; }

 private:
  static absl::Status Error(const std::string& what, const std::string& path, int err) {
    return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", ErrnoString(err)));
  }

  const std::string path_;
  const std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
};

absl::StatusOr<ExportResult> Export(const LoadedCheckpoint& ckpt, const std::string& out,
                                    const ExportOptions& options) {
  PST_ASSIGN_OR_RETURN(const std::vector<LogicalVariable> vars, PlanVariables(ckpt));
  PST_ASSIGN_OR_RETURN(const std::vector<OutputTensor> tensors, PlanTensors(vars, options));

  std::map<std::string, std::string> metadata = {
      {"format", "pstrain"},
      {"global_step", absl::StrCat(ckpt.manifest.global_step())},
      {"checkpoint", ckpt.dir},
  };
  const std::string header = MakeHeader(tensors, metadata);
  const uint64_t header_bytes = header.size();
  char length[8];
  std::memcpy(length, &header_bytes, sizeof(length));  // Little-endian host.

  AtomicFile file(out);
  PST_RETURN_IF_ERROR(file.Open());
  PST_RETURN_IF_ERROR(file.Append(absl::string_view(length, sizeof(length))));
  PST_RETURN_IF_ERROR(file.Append(header));
  for (const OutputTensor& t : tensors) PST_RETURN_IF_ERROR(file.Append(TensorBytes(t)));
  PST_RETURN_IF_ERROR(file.Commit());

  ExportResult result;
  result.checkpoint = ckpt.dir;
  result.global_step = ckpt.manifest.global_step();
  result.tensors = static_cast<int>(tensors.size());
  result.bytes = static_cast<int64_t>(file.written());
  return result;
}

}  // namespace

absl::StatusOr<ExportResult> ExportSafetensors(const std::string& dir, const std::string& out,
                                               const ExportOptions& options) {
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the output ", out, " is a directory; give a file name"));
  }
  if (fs::exists(fs::path(dir) / common::kManifestFile, ec)) {
    PST_ASSIGN_OR_RETURN(const LoadedCheckpoint ckpt, LoadCheckpoint(dir));
    return Export(ckpt, out, options);
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at ", dir, ": no such directory"));
  }
  const std::vector<std::string> dirs = common::ListCheckpoints(dir);
  if (dirs.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, " (neither a ",
                                            common::kManifestFile,
                                            " nor ckpt-* directories with one)"));
  }
  std::vector<std::string> skipped;
  absl::Status newest_error;
  for (const std::string& d : dirs) {
    absl::StatusOr<LoadedCheckpoint> ckpt = LoadCheckpoint(d);
    absl::StatusOr<ExportResult> result =
        ckpt.ok() ? Export(*ckpt, out, options) : absl::StatusOr<ExportResult>(ckpt.status());
    if (result.ok()) {
      result->skipped = std::move(skipped);
      return result;
    }
    // Only a checkpoint that fails its checks is passed over.
    if (!absl::IsDataLoss(result.status()) && !absl::IsNotFound(result.status())) {
      return result.status();
    }
    if (newest_error.ok()) newest_error = result.status();
    skipped.push_back(absl::StrCat(d, ": ", result.status().message()));
  }
  return absl::Status(newest_error.code(),
                      absl::StrCat("no checkpoint in ", dir, " passes its checks (",
                                   absl::StrJoin(skipped, "; "), ")"));
}

}  // namespace pst::common
