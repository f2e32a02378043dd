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

}  // namespace pst::common
