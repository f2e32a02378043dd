#include "common/checkpoint_chain.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_layout.h"
#include "common/safe_file.h"
#include "common/shard_reader.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

struct CheckpointDir {
  enum class State {
    kCommitted,   // its manifest reads and parses
    kNoManifest,  // no manifest at all: an interrupted save's debris
    kUnreadable,  // a manifest that cannot be read or parsed: never removed
  };
  int64_t step = 0;
  std::string path;
  State state = State::kNoManifest;
  std::string base;  // kCommitted: its manifest's
};

// Every "ckpt-<digits>" directory under `root` (symbolic links are not
// checkpoints), newest first.
std::vector<CheckpointDir> ScanCheckpointDirs(const std::string& root) {
  std::vector<CheckpointDir> dirs;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) return dirs;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const int64_t step = CheckpointStep(it->path().filename().string());
    if (step < 0) continue;
    std::error_code dir_ec;
    if (!fs::is_directory(it->symlink_status(dir_ec)) || dir_ec) continue;
    CheckpointDir d;
    d.step = step;
    d.path = it->path().string();
    if (absl::StatusOr<proto::CheckpointManifest> m = ReadManifest(d.path); m.ok()) {
      d.state = CheckpointDir::State::kCommitted;
      d.base = m->base();
    } else {
      // Debris only when there is certainly no manifest: a directory that
      // cannot be looked into is not known to be debris.
      struct stat st;
      const std::string manifest = (fs::path(d.path) / kManifestFile).string();
      const bool absent = ::lstat(manifest.c_str(), &st) != 0 && errno == ENOENT;
      d.state = absent ? CheckpointDir::State::kNoManifest : CheckpointDir::State::kUnreadable;
    }
    dirs.push_back(std::move(d));
  }
  if (ec) dirs.clear();
  std::sort(dirs.begin(), dirs.end(), [](const CheckpointDir& a, const CheckpointDir& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return dirs;
}

// One link's checks (InspectCheckpoint's, but for the plan's coverage,
// which the whole chain gives), into `report`; `saved` gets the names of
// the records.
absl::Status InspectLink(const std::string& dir, CheckpointReport* report,
                         absl::flat_hash_set<std::string>* saved) {
  PST_ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest, ReadManifest(dir));
  report->global_step = manifest.global_step();
  report->inexact = manifest.inexact();
  report->num_ps = manifest.shards_size();
  report->total_bytes = 0;
  report->variables.clear();
  if (absl::Status shards = CheckManifestShards(manifest); !shards.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest in ", dir, ": ", shards.message()));
  }
  for (const proto::CheckpointShard& shard : manifest.shards()) {
    const std::string path = (fs::path(dir) / shard.file()).string();
    PST_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> reader, ShardReader::Open(path));
    if (reader->file_bytes() != shard.bytes()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is ",
                                              reader->file_bytes(), " bytes, the manifest says ",
                                              shard.bytes()));
    }
    std::vector<ShardRecord> records;
    absl::Status parsed;
    while (true) {
      ShardRecord record;
      // The report needs the spec, rows and version, not the tensors.
      absl::StatusOr<bool> more =
          reader->Next(&record, [](const proto::VariableSpec&) { return false; });
      if (!more.ok()) {
        parsed = more.status();
        break;
      }
      if (!*more) break;
      records.push_back(std::move(record));
    }
    if (parsed.ok() && reader->file_crc32() != shard.crc32()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " has crc32 ",
                                              reader->file_crc32(), ", the manifest says ",
                                              shard.crc32()));
    }
    PST_RETURN_IF_ERROR(parsed);
    report->total_bytes += reader->file_bytes();
    for (const ShardRecord& r : records) {
      CheckpointReport::Variable v;
      v.name = r.spec.name();
      if (ShardSpecIsHash(r.spec)) {
        std::vector<int64_t> rest(r.spec.shape().begin(), r.spec.shape().end());
        if (!rest.empty()) rest.erase(rest.begin());
        v.shape = absl::StrCat("[", r.rows, " ids", rest.empty() ? "" : ", ",
                               absl::StrJoin(rest, ", "), "]");
      } else {
        v.shape = ShapeString(r.spec.shape());
      }
      v.rows = r.rows;
      v.removed = static_cast<int64_t>(r.removed_ids.size());
      v.version = r.version;
      v.slots = static_cast<int>(r.slots.size());
      v.ps_index = shard.ps_index();
      saved->insert(v.name);
      report->variables.push_back(std::move(v));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ListCheckpoints(const std::string& root) {
  std::vector<std::string> out;
  for (CheckpointDir& d : ScanCheckpointDirs(root)) {
    if (d.state == CheckpointDir::State::kCommitted) out.push_back(std::move(d.path));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CheckpointChain(const std::string& dir) {
  PST_ASSIGN_OR_RETURN(proto::CheckpointManifest manifest, ReadManifest(dir));
  const fs::path parent = fs::path(dir).parent_path();
  std::vector<std::string> links = {dir};
  const int num_ps = manifest.shards_size();
  while (!manifest.base().empty()) {
    const std::string& link = links.back();
    const std::string base = manifest.base();
    if (!CheckCheckpointName(base).ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", link, " is incremental on '", base,
                                              "', which is not a checkpoint name"));
    }
    const std::string base_dir = (parent / base).string();
    absl::StatusOr<proto::CheckpointManifest> before = ReadManifest(base_dir);
    if (!before.ok()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", link, " is incremental on ", base_dir, ", which ",
                       absl::IsNotFound(before.status())
                           ? "is missing"
                           : absl::StrCat("cannot be read (", before.status().message(), ")")));
    }
    // Strictly older: a chain always ends.
    if (before->global_step() >= manifest.global_step()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", link, " (step ", manifest.global_step(), ") is incremental on ", base_dir,
          " of step ", before->global_step(), ", which is not older"));
    }
    if (before->shards_size() != num_ps) {
      return absl::DataLossError(absl::StrCat("checkpoint ", link, " of ", num_ps,
                                              " shard(s) is incremental on ", base_dir, " of ",
                                              before->shards_size()));
    }
    manifest = *std::move(before);
    links.push_back(base_dir);
  }
  std::reverse(links.begin(), links.end());
  return links;
}

absl::StatusOr<proto::RestoreRequest> RestoreRequestFor(const std::string& dir) {
  PST_ASSIGN_OR_RETURN(const std::vector<std::string> chain, CheckpointChain(dir));
  proto::RestoreRequest request;
  for (size_t i = 0; i < chain.size(); ++i) {
    PST_ASSIGN_OR_RETURN(proto::CheckpointManifest manifest, ReadManifest(chain[i]));
    const std::string name = fs::path(chain[i]).filename().string();
    if (i + 1 < chain.size()) {
      proto::CheckpointLink* link = request.add_chain();
      link->set_checkpoint(name);
      *link->mutable_manifest() = std::move(manifest);
    } else {
      request.set_checkpoint(name);
      *request.mutable_manifest() = std::move(manifest);
    }
  }
  return request;
}

absl::Status FoldHashRecord(ShardRecord* into, ShardRecord&& later, const std::string& where) {
  auto loss = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(where, ": '", later.spec.name(), "' ", why));
  };
  if (later.spec.shape_size() < 1 || later.spec.shape_size() != into->spec.shape_size() ||
      !std::equal(later.spec.shape().begin() + 1, later.spec.shape().end(),
                  into->spec.shape().begin() + 1) ||
      later.slots.size() != into->slots.size()) {
    return loss("has rows unlike the link before");
  }
  absl::StatusOr<uint64_t> row_bytes = ShardFloatPayloadBytes(later.spec, 1);
  if (!row_bytes.ok()) return loss(row_bytes.status().message());
  const size_t dim = static_cast<size_t>(*row_bytes / sizeof(float));
  absl::flat_hash_map<int64_t, size_t> at;  // id -> row in `into`
  at.reserve(into->hash_ids.size());
  for (size_t k = 0; k < into->hash_ids.size(); ++k) at[into->hash_ids[k]] = k;
  std::vector<bool> gone(into->hash_ids.size(), false);
  for (int64_t id : later.removed_ids) {
    if (auto it = at.find(id); it != at.end()) gone[it->second] = true;
  }
  // Keep the rows not removed nor replaced, then add the later ones.
  std::vector<bool> replaced(into->hash_ids.size(), false);
  for (int64_t id : later.hash_ids) {
    if (auto it = at.find(id); it != at.end()) replaced[it->second] = true;
  }
  ShardRecord out;
  out.spec = later.spec;
  out.version = later.version;
  out.admission = std::move(later.admission);
  out.slots.resize(later.slots.size());
  auto take = [&](const ShardRecord& from, size_t k) {
    out.hash_ids.push_back(from.hash_ids[k]);
    out.values.insert(out.values.end(), from.values.begin() + k * dim,
                      from.values.begin() + (k + 1) * dim);
    for (size_t s = 0; s < out.slots.size(); ++s) {
      out.slots[s].insert(out.slots[s].end(), from.slots[s].begin() + k * dim,
                          from.slots[s].begin() + (k + 1) * dim);
    }
    if (!from.row_last.empty()) {
      out.row_last.push_back(from.row_last[k]);
      out.row_count.push_back(from.row_count[k]);
    }
  };
  for (size_t k = 0; k < into->hash_ids.size(); ++k) {
    if (!gone[k] && !replaced[k]) take(*into, k);
  }
  for (size_t k = 0; k < later.hash_ids.size(); ++k) take(later, k);
  out.rows = static_cast<int64_t>(out.hash_ids.size());
  if (!out.row_last.empty() && out.row_last.size() != out.hash_ids.size()) {
    return loss("has row entries where the link before has none, or none where it has");
  }
  *into = std::move(out);
  return absl::OkStatus();
}

absl::Status FoldLink(std::vector<ShardRecord>* records, std::vector<ShardRecord> later,
                      const std::string& where) {
  absl::flat_hash_map<std::string, size_t> by_name;
  for (size_t i = 0; i < records->size(); ++i) by_name[(*records)[i].spec.name()] = i;
  for (ShardRecord& r : later) {
    auto it = by_name.find(r.spec.name());
    if (it == by_name.end()) {
      return absl::DataLossError(
          absl::StrCat(where, ": '", r.spec.name(), "' is in no record of the link before"));
    }
    ShardRecord& into = (*records)[it->second];
    if (ShardSpecIsHash(into.spec) != ShardSpecIsHash(r.spec)) {
      return absl::DataLossError(absl::StrCat(where, ": '", r.spec.name(),
                                              "' is of another kind than in the link before"));
    }
    if (ShardSpecIsHash(r.spec)) {
      PST_RETURN_IF_ERROR(FoldHashRecord(&into, std::move(r), where));
    } else {
      into = std::move(r);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFoldedCheckpoint(const std::string& dir, const std::string& out) {
  PST_ASSIGN_OR_RETURN(const std::vector<std::string> chain, CheckpointChain(dir));
  PST_ASSIGN_OR_RETURN(proto::CheckpointManifest manifest, ReadManifest(dir));
  manifest.clear_base();
  if (absl::Status names = CheckManifestShards(manifest); !names.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest in ", dir, ": ", names.message()));
  }
  for (proto::CheckpointShard& shard : *manifest.mutable_shards()) {
    std::vector<ShardRecord> records;
    for (const std::string& link : chain) {
      const std::string path = (fs::path(link) / shard.file()).string();
      PST_ASSIGN_OR_RETURN(std::vector<ShardRecord> read, ReadShardFile(path));
      if (link == chain.front()) {
        records = std::move(read);
      } else {
        PST_RETURN_IF_ERROR(FoldLink(&records, std::move(read), path));
      }
    }
    const int ps_index = shard.ps_index();
    PST_RETURN_IF_ERROR(WriteShardFile((fs::path(out) / shard.file()).string(), records, &shard));
    shard.set_ps_index(ps_index);
  }
  return WriteManifest(out, manifest);
}

absl::Status PruneCheckpoints(const std::string& root, int keep, const std::string& verified) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints to keep must be at least 1, got ", keep));
  }
  const std::vector<CheckpointDir> dirs = ScanCheckpointDirs(root);
  const std::string verified_path = fs::path(verified).lexically_normal().string();
  std::map<std::string, const CheckpointDir*> by_name;
  const CheckpointDir* newest = nullptr;
  const CheckpointDir* verified_dir = nullptr;
  for (const CheckpointDir& d : dirs) {
    by_name[fs::path(d.path).filename().string()] = &d;
    if (d.state != CheckpointDir::State::kCommitted) continue;
    if (newest == nullptr) newest = &d;
    if (fs::path(d.path).lexically_normal().string() == verified_path) verified_dir = &d;
  }
  // Nothing removed unless the checkpoint just verified is here to stay.
  if (newest == nullptr || verified_dir == nullptr) return absl::OkStatus();

  // Each committed directory's chain: its full checkpoint, or where the
  // chain breaks (cut: no manifest at all, or no directory; else a link
  // that cannot be read, which may read again and is never given up).
  struct Root {
    const CheckpointDir* full = nullptr;
    bool cut = false;
  };
  auto root_of = [&](const CheckpointDir& d) {
    const CheckpointDir* at = &d;
    while (!at->base.empty()) {
      auto it = by_name.find(at->base);
      if (it == by_name.end() || it->second->state == CheckpointDir::State::kNoManifest ||
          it->second->step >= at->step) {
        return Root{nullptr, true};
      }
      if (it->second->state == CheckpointDir::State::kUnreadable) return Root{nullptr, false};
      at = it->second;
    }
    return Root{at, false};
  };
  // The chains kept: the verified one's, then the newest others.
  absl::flat_hash_set<const CheckpointDir*> kept_fulls;
  const Root verified_root = root_of(*verified_dir);
  if (verified_root.full == nullptr) return absl::OkStatus();  // checked; not expected
  kept_fulls.insert(verified_root.full);
  for (const CheckpointDir& d : dirs) {  // newest first
    if (static_cast<int>(kept_fulls.size()) >= keep) break;
    if (d.state == CheckpointDir::State::kCommitted && d.base.empty()) kept_fulls.insert(&d);
  }

  std::vector<std::string> errors;
  bool removed = false;
  for (const CheckpointDir& d : dirs) {
    bool remove = false;
    switch (d.state) {
      case CheckpointDir::State::kCommitted: {
        const Root r = root_of(d);
        if (r.full != nullptr) {
          remove = !kept_fulls.contains(r.full);
        } else {
          remove = r.cut && d.step < verified_dir->step;
        }
        break;
      }
      case CheckpointDir::State::kNoManifest:
        remove = d.step < newest->step;  // Newer debris may be a save in progress.
        break;
      case CheckpointDir::State::kUnreadable:
        break;  // Never removed because it could not be read.
    }
    if (!remove) continue;
    std::error_code ec;
    fs::remove_all(d.path, ec);
    if (ec) errors.push_back(absl::StrCat(d.path, ": ", ec.message()));
    removed = true;
  }
  if (removed) {
    if (absl::Status synced = FsyncDirectory(root); !synced.ok()) {
      errors.push_back(std::string(synced.message()));
    }
  }
  if (!errors.empty()) {
    return absl::InternalError(
        absl::StrCat("cannot remove old checkpoints: ", absl::StrJoin(errors, "; ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointReport> InspectCheckpoint(const std::string& dir) {
  PST_ASSIGN_OR_RETURN(const std::vector<std::string> chain, CheckpointChain(dir));
  PST_ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest, ReadManifest(dir));
  CheckpointReport report;
  absl::flat_hash_set<std::string> saved;
  for (const std::string& link : chain) {
    absl::Status checked = InspectLink(link, &report, &saved);
    if (!checked.ok() && link != chain.back()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", dir, " is incremental on ", link,
                                              ", which fails its checks: ", checked.message()));
    }
    PST_RETURN_IF_ERROR(checked);
    report.chain.push_back(fs::path(link).filename().string());
    report.chain_bytes += report.total_bytes;
  }
  // Every variable (or partition) the plan placed was written by some ps,
  // in some link. A ps that restarted just before a save would write an
  // empty shard whose checksums are all good.
  for (const proto::PlacementPlan::Entry& entry : manifest.plan().variables()) {
    if (!saved.contains(entry.spec().name())) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", dir, " is incomplete: its plan places '", entry.spec().name(),
                       "' on ps ", entry.ps_index(), ", but no shard holds it"));
    }
  }
  return report;
}

}  // namespace pst::common
