#include "evaluator/best_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "common/logging.h"
#include "common/safe_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pst::evaluator {
namespace {

namespace fs = std::filesystem;

bool Minimized(const std::string& metric, BestMode mode) {
  if (mode != BestMode::kAuto) return mode == BestMode::kMin;
  return absl::StrContains(metric, "loss") || absl::StrContains(metric, "error");
}

}  // namespace

absl::StatusOr<BestMode> ParseBestMode(const std::string& text) {
  if (text == "auto") return BestMode::kAuto;
  if (text == "max") return BestMode::kMax;
  if (text == "min") return BestMode::kMin;
  return absl::InvalidArgumentError(
      absl::StrCat("--best_mode must be auto, max or min, got '", text, "'"));
}

BestCheckpoint::BestCheckpoint(std::string root, std::string metric, BestMode mode)
    : root_(std::move(root)), metric_(std::move(metric)), mode_(mode) {
  std::ifstream in(fs::path(root_) / kBestDir / kBestFile);
  if (!in) return;
  const nlohmann::json best = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!best.is_object() || !best.contains("metric") || !best.contains("value") ||
      !best["metric"].is_string() || !best["value"].is_number()) {
    spdlog::warn("{}: not a best-checkpoint record; the next evaluation replaces it",
                 (fs::path(root_) / kBestDir / kBestFile).string());
    return;
  }
  if (metric_.empty() || metric_ == best["metric"].get<std::string>()) {
    metric_ = best["metric"].get<std::string>();
    best_ = best["value"].get<double>();
    spdlog::info("best checkpoint so far: {} = {} ({})", metric_, *best_,
                 (fs::path(root_) / kBestDir).string());
  }
}

bool BestCheckpoint::Better(double value) const {
  if (!best_.has_value()) return true;
  return Minimized(metric_, mode_) ? value < *best_ : value > *best_;
}

absl::StatusOr<bool> BestCheckpoint::Offer(const std::string& path, int64_t step,
                                           const std::map<std::string, double>& metrics) {
  if (metric_.empty()) {
    for (const char* candidate : {"test_accuracy", "test_auc", "accuracy", "auc"}) {
      if (metrics.count(candidate) > 0) {
        metric_ = candidate;
        break;
      }
    }
    if (metric_.empty()) {
      spdlog::warn(
          "no best checkpoint kept: the evaluation reports none of test_accuracy, test_auc, "
          "accuracy, auc; choose one of its metrics with --best_metric");
      return false;
    }
  }
  const auto it = metrics.find(metric_);
  if (it == metrics.end()) {
    spdlog::warn("the evaluation of {} does not report --best_metric={}", path, metric_);
    return false;
  }
  if (!Better(it->second)) return false;
  PST_RETURN_IF_ERROR(Replace(path, step, it->second));
  best_ = it->second;
  return true;
}

absl::Status BestCheckpoint::Replace(const std::string& path, int64_t step, double value) {
  const fs::path best = fs::path(root_) / kBestDir;
  const fs::path tmp = fs::path(root_) / absl::StrCat(kBestDir, ".tmp");
  const fs::path old = fs::path(root_) / absl::StrCat(kBestDir, ".old");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::remove_all(old, ec);
  auto failed = [&](const fs::path& what, const std::string& why) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return absl::InternalError(absl::StrCat("best checkpoint: ", what.string(), ": ", why));
  };
  if (!fs::create_directory(tmp, ec)) return failed(tmp, ec ? ec.message() : "exists");
  absl::StatusOr<proto::CheckpointManifest> manifest = common::ReadManifest(path);
  if (!manifest.ok()) return failed(path, std::string(manifest.status().message()));
  if (!manifest->base().empty()) {
    // An incremental checkpoint: its chain folded into one whole checkpoint
    // (its links may be pruned while best/ stays).
    if (absl::Status folded = common::WriteFoldedCheckpoint(path, tmp.string()); !folded.ok()) {
      return failed(path, std::string(folded.message()));
    }
  } else {
    fs::directory_iterator it(path, ec);
    if (ec) return failed(path, ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) return failed(path, ec.message());
      if (!fs::is_regular_file(it->symlink_status(ec))) continue;
      const fs::path to = tmp / it->path().filename();
      // The files of a committed checkpoint are never written again (a
      // save writes new files and renames them): a link shares them safely.
      fs::create_hard_link(it->path(), to, ec);
      if (ec && !fs::copy_file(it->path(), to, ec)) return failed(it->path(), ec.message());
    }
  }
  nlohmann::json record = {{"metric", metric_},
                           {"value", value},
                           {"mode", Minimized(metric_, mode_) ? "min" : "max"},
                           {"global_step", step},
                           {"checkpoint", fs::path(path).filename().string()}};
  {
    std::ofstream out(tmp / kBestFile, std::ios::trunc);
    out << record.dump(2) << "\n";
    out.close();
    if (!out) return failed(tmp / kBestFile, "cannot write");
  }
  PST_RETURN_IF_ERROR(common::FsyncDirectory(tmp.string()));
  // best -> best.old, best.tmp -> best: a crash between the two leaves
  // best.old, which the next replacement removes.
  if (fs::exists(best, ec)) {
    fs::rename(best, old, ec);
    if (ec) return failed(best, ec.message());
  }
  fs::rename(tmp, best, ec);
  if (ec) {
    std::error_code ignored;
    fs::rename(old, best, ignored);
    return failed(tmp, ec.message());
  }
  fs::remove_all(old, ec);
  PST_RETURN_IF_ERROR(common::FsyncDirectory(root_));
  spdlog::info("best checkpoint: {} = {} at step {}, kept in {}", metric_, value, step,
               best.string());
  return absl::OkStatus();
}

}  // namespace pst::evaluator
