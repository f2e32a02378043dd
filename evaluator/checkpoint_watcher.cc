#include "evaluator/checkpoint_watcher.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"

namespace pst::evaluator {

namespace fs = std::filesystem;

absl::StatusOr<std::optional<FoundCheckpoint>> CheckpointWatcher::Next() {
  std::error_code ec;
  const fs::file_status root_status = fs::status(root_, ec);
  if (ec || !fs::exists(root_status)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", root_, " does not exist"));
  }
  if (!fs::is_directory(root_status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint directory ", root_, " is not a directory"));
  }
  fs::directory_iterator it(root_, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot list checkpoint directory ", root_, ": ", ec.message()));
  }
  int64_t next_step = -1;
  std::string next_path;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot list checkpoint directory ", root_, ": ", ec.message()));
    }
    const int64_t step = common::CheckpointStep(it->path().filename().string());
    if (step <= last_step_ || (next_step >= 0 && step >= next_step)) continue;
    std::error_code dir_ec;
    if (!fs::is_directory(it->symlink_status(dir_ec)) || dir_ec) continue;
    // No manifest yet: a save in progress (or the debris of one).
    struct stat st;
    const std::string manifest = (it->path() / common::kManifestFile).string();
    if (::lstat(manifest.c_str(), &st) != 0 && errno == ENOENT) continue;
    next_step = step;
    next_path = it->path().string();
  }
  if (next_step < 0) return std::optional<FoundCheckpoint>();
  FoundCheckpoint found;
  found.path = next_path;
  found.name = fs::path(next_path).filename().string();
  found.step = next_step;
  last_step_ = next_step;
  absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(next_path);
  if (!report.ok()) {
    found.problem = report.status();
    return std::optional<FoundCheckpoint>(std::move(found));
  }
  absl::StatusOr<proto::CheckpointManifest> manifest = common::ReadManifest(next_path);
  if (!manifest.ok()) {
    found.problem = manifest.status();
  } else {
    found.manifest = *std::move(manifest);
  }
  return std::optional<FoundCheckpoint>(std::move(found));
}

}  // namespace pst::evaluator
