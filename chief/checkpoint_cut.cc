#include "chief/checkpoint_cut.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"

namespace pst::chief {

absl::StatusOr<std::vector<int64_t>> CutPositions(
    const std::vector<proto::SaveResponse>& snapshots, bool sync,
    const std::vector<int64_t>& fallback) {
  const int num_workers = static_cast<int>(fallback.size());
  // Per worker: the (step, position) the first ps holding dense variables
  // reported, and how many such ps reported one.
  struct Seen {
    int64_t step = -1;
    int64_t position = -1;
    size_t ps = 0;
    int first_ps = -1;
  };
  std::vector<Seen> seen(num_workers);
  size_t dense_ps = 0;
  std::optional<int64_t> version;
  for (size_t p = 0; p < snapshots.size(); ++p) {
    const proto::SaveResponse& s = snapshots[p];
    // Every ps, one that holds tables only too: in sync, row variables move
    // one version per step as the dense ones, and a step summed but not
    // applied on any ps is no cut.
    if (s.sync_pending()) {
      return absl::AbortedError(
          absl::StrCat("ps ", p, " holds gradients accumulated but not applied yet"));
    }
    if (sync && s.holds_any()) {
      if (version.has_value() && *version != s.max_version()) {
        return absl::AbortedError(absl::StrCat("ps ", p, " is at version ", s.max_version(),
                                               ", another ps at ", *version));
      }
      version = s.max_version();
    }
    if (!s.holds_dense()) continue;
    ++dense_ps;
    for (const proto::WorkerCut& w : s.cut()) {
      const int index = w.worker_index();
      if (index < 0 || index >= num_workers) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps ", p, " holds pushes of worker ", index, ", not a worker of this job"));
      }
      if (w.min_step() != w.max_step()) {
        return absl::AbortedError(absl::StrCat("ps ", p, " holds part of step ", w.max_step(),
                                               " of worker ", index));
      }
      if (w.position() < 0 && w.max_step() < 0) continue;  // only row pushes
      Seen& x = seen[index];
      if (x.ps == 0) {
        x.step = w.max_step();
        x.position = w.position();
        x.first_ps = static_cast<int>(p);
      } else if (x.step != w.max_step() || x.position != w.position()) {
        return absl::AbortedError(absl::StrCat(
            "worker ", index, " is at step ", w.max_step(), " (position ", w.position(),
            ") on ps ", p, " but at step ", x.step, " (position ", x.position, ") on ps ",
            x.first_ps));
      }
      ++x.ps;
    }
  }
  std::vector<int64_t> positions(num_workers);
  for (int w = 0; w < num_workers; ++w) {
    const Seen& x = seen[w];
    if (x.ps == 0) {
      positions[w] = fallback[w];
    } else if (x.ps != dense_ps) {
      return absl::AbortedError(absl::StrCat("worker ", w, "'s pushes reached ", x.ps, " of the ",
                                             dense_ps, " ps holding dense variables"));
    } else {
      positions[w] = x.position >= 0 ? x.position : fallback[w];
    }
  }
  return positions;
}

std::vector<int64_t> LowestPositions(const std::vector<proto::SaveResponse>& snapshots,
                                     const std::vector<int64_t>& fallback) {
  std::vector<int64_t> positions = fallback;
  std::vector<bool> seen(fallback.size(), false);
  for (const proto::SaveResponse& s : snapshots) {
    if (!s.holds_dense()) continue;
    for (const proto::WorkerCut& w : s.cut()) {
      const int index = w.worker_index();
      if (index < 0 || index >= static_cast<int>(positions.size()) || w.position() < 0) continue;
      positions[index] = seen[index] ? std::min(positions[index], w.position()) : w.position();
      seen[index] = true;
    }
  }
  return positions;
}

}  // namespace pst::chief
