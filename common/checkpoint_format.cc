#include "common/checkpoint_format.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_layout.h"
#include "common/safe_file.h"
#include "common/shard_reader.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "google/protobuf/util/json_util.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

constexpr char kCheckpointPrefix[] = "ckpt-";

struct CheckpointDir {
  enum class State {
    kCommitted,   // its manifest reads and parses
    kNoManifest,  // no manifest at all: an interrupted save's debris
    kUnreadable,  // a manifest that cannot be read or parsed: never removed
  };
  int64_t step = 0;
  std::string path;
  State state = State::kNoManifest;
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
    if (ReadManifest(d.path).ok()) {
      d.state = CheckpointDir::State::kCommitted;
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

// "shard-<i>-of-<n>.pst" with 0 <= i < n: sets *index and *count.
bool ParseShardFileName(absl::string_view name, int* index, int* count) {
  int i = -1, n = -1, consumed = 0;
  const std::string copy(name);
  if (std::sscanf(copy.c_str(), "shard-%d-of-%d.pst%n", &i, &n, &consumed) != 2) return false;
  if (consumed != static_cast<int>(copy.size()) || i < 0 || n < 1 || i >= n) return false;
  if (ShardFileName(i, n) != copy) return false;  // no signs, spaces or leading zeros
  *index = i;
  *count = n;
  return true;
}

}  // namespace

int64_t CheckpointStep(const std::string& name) {
  const absl::string_view prefix(kCheckpointPrefix);
  if (name.size() <= prefix.size() || absl::string_view(name).substr(0, prefix.size()) != prefix) {
    return -1;
  }
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return -1;
  int64_t step = 0;
  const auto [ptr, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || ptr != last) return -1;
  return step;
}

std::string CheckpointDirName(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld", static_cast<long long>(step));
  return buf;
}

std::string ShardFileName(int ps_index, int num_ps) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "shard-%d-of-%d.pst", ps_index, num_ps);
  return buf;
}

absl::StatusOr<std::vector<ShardRecord>> ReadShardFile(const std::string& path) {
  PST_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> reader, ShardReader::Open(path));
  std::vector<ShardRecord> records;
  while (true) {
    ShardRecord record;
    PST_ASSIGN_OR_RETURN(const bool more, reader->Next(&record));
    if (!more) break;
    records.push_back(std::move(record));
  }
  return records;
}

absl::Status WriteManifest(const std::string& dir, const proto::CheckpointManifest& manifest) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(manifest, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode the manifest for ", path, ": ", status.ToString()));
  }
  return WriteFileAtomically(path, json);
}

absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  PST_ASSIGN_OR_RETURN(const std::string json, ReadWholeFile(path));
  proto::CheckpointManifest manifest;
  google::protobuf::util::JsonParseOptions options;
  // A field a later version added does not make the checkpoint unreadable;
  // format_version says when the meaning changed.
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &manifest, options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest ", path, " does not parse: ", status.ToString()));
  }
  if (manifest.format_version() != kManifestFormatVersion) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", path, " is of format version ",
                                            manifest.format_version(), "; this build reads ",
                                            kManifestFormatVersion));
  }
  return manifest;
}

absl::Status CheckCheckpointName(absl::string_view name) {
  if (CheckpointStep(std::string(name)) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name, "' is not a checkpoint name: checkpoints are named ckpt-<digits>, never a path"));
  }
  return absl::OkStatus();
}

absl::Status CheckManifestShards(const proto::CheckpointManifest& manifest) {
  const int n = manifest.shards_size();
  if (n < 1) return absl::InvalidArgumentError("the manifest lists no shard");
  std::vector<bool> seen(n, false);
  for (const proto::CheckpointShard& shard : manifest.shards()) {
    int index = -1, count = -1;
    if (!ParseShardFileName(shard.file(), &index, &count)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the manifest names shard file '", shard.file(),
          "', which is not of the form shard-<ps>-of-<num_ps>.pst (never a path)"));
    }
    if (count != n || index != shard.ps_index() || seen[index]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the manifest's shards must be shard-0-of-", n, " to shard-", n - 1, "-of-", n,
          ", each once; '", shard.file(), "' (ps_index ", shard.ps_index(), ") does not fit"));
    }
    if (shard.bytes() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the manifest gives '", shard.file(), "' a negative size"));
    }
    seen[index] = true;
  }
  return absl::OkStatus();
}

std::vector<std::string> ListCheckpoints(const std::string& root) {
  std::vector<std::string> out;
  for (CheckpointDir& d : ScanCheckpointDirs(root)) {
    if (d.state == CheckpointDir::State::kCommitted) out.push_back(std::move(d.path));
  }
  return out;
}

absl::Status PruneCheckpoints(const std::string& root, int keep, const std::string& verified) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints to keep must be at least 1, got ", keep));
  }
  const std::vector<CheckpointDir> dirs = ScanCheckpointDirs(root);
  const fs::path verified_path = fs::path(verified).lexically_normal();
  const CheckpointDir* newest = nullptr;
  bool verified_found = false;
  for (const CheckpointDir& d : dirs) {
    if (d.state != CheckpointDir::State::kCommitted) continue;
    if (newest == nullptr) newest = &d;
    verified_found |= fs::path(d.path).lexically_normal() == verified_path;
  }
  // Nothing removed unless the checkpoint just verified is here to stay.
  if (newest == nullptr || !verified_found) return absl::OkStatus();

  std::vector<std::string> errors;
  int kept = 1;  // the verified one
  bool removed = false;
  for (const CheckpointDir& d : dirs) {
    bool remove = false;
    switch (d.state) {
      case CheckpointDir::State::kCommitted:
        if (fs::path(d.path).lexically_normal() == verified_path) continue;
        remove = kept >= keep;
        if (!remove) ++kept;
        break;
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
  PST_ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest, ReadManifest(dir));
  CheckpointReport report;
  report.global_step = manifest.global_step();
  report.num_ps = manifest.shards_size();
  if (absl::Status shards = CheckManifestShards(manifest); !shards.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest in ", dir, ": ", shards.message()));
  }
  for (const proto::CheckpointShard& shard : manifest.shards()) {
    const std::string& name = shard.file();
    const std::string path = (fs::path(dir) / name).string();
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
    report.total_bytes += reader->file_bytes();
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
      v.version = r.version;
      v.slots = static_cast<int>(r.slots.size());
      v.ps_index = shard.ps_index();
      report.variables.push_back(std::move(v));
    }
  }
  // Every variable (or partition) the plan placed was written by some ps. A
  // ps that restarted just before a save would write an empty shard whose
  // checksums are all good.
  absl::flat_hash_set<std::string> saved;
  for (const CheckpointReport::Variable& v : report.variables) saved.insert(v.name);
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
