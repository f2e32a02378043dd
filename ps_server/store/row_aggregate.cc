#include "ps_server/store/row_aggregate.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pst::ps {

RowAggregate::Add RowAggregate::AddPush(int64_t version, int64_t step, int32_t worker,
                                        std::span<const int64_t> ids, std::span<const float> grad,
                                        const std::vector<bool>& skip) {
  if (step < version) return Add::kStale;
  if (step > version) return Add::kAhead;
  if (std::find(contributors_.begin(), contributors_.end(), worker) != contributors_.end()) {
    return Add::kDuplicate;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!skip.empty() && skip[i]) continue;
    auto [it, fresh] = index_.try_emplace(ids[i], static_cast<int64_t>(ids_.size()));
    if (fresh) {
      ids_.push_back(ids[i]);
      sums_.resize(sums_.size() + dim_, 0.0f);
    }
    float* sum = sums_.data() + it->second * dim_;
    const float* g = grad.data() + i * dim_;
    for (int64_t j = 0; j < dim_; ++j) sum[j] += g[j];
  }
  contributors_.push_back(worker);
  return Add::kAdded;
}

RowAggregate::Mean RowAggregate::TakeMean() {
  Mean mean;
  mean.pushes = static_cast<int>(contributors_.size());
  std::vector<int64_t> order(ids_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids_[a] < ids_[b]; });
  const float scale = mean.pushes > 0 ? 1.0f / static_cast<float>(mean.pushes) : 0.0f;
  mean.ids.reserve(order.size());
  mean.grad.reserve(order.size() * dim_);
  for (int64_t r : order) {
    mean.ids.push_back(ids_[r]);
    // Scaled as the dense aggregate is (Variable::MaybeApplyAggregateLocked):
    // the sum times 1/pushes.
    for (int64_t j = 0; j < dim_; ++j) mean.grad.push_back(sums_[r * dim_ + j] * scale);
  }
  index_.clear();
  ids_.clear();
  sums_.clear();
  contributors_.clear();
  return mean;
}

RowAggregate::Saved RowAggregate::Export() const { return Saved{ids_, sums_, contributors_}; }

absl::Status RowAggregate::Load(Saved saved) {
  if (saved.sums.size() != saved.ids.size() * static_cast<size_t>(dim_)) {
    return absl::InvalidArgumentError("row sums: not dim floats per id");
  }
  absl::flat_hash_map<int64_t, int64_t> index;
  for (size_t i = 0; i < saved.ids.size(); ++i) {
    if (!index.emplace(saved.ids[i], static_cast<int64_t>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("row sums: id ", saved.ids[i], " twice"));
    }
  }
  for (size_t i = 0; i < saved.contributors.size(); ++i) {
    if (std::count(saved.contributors.begin(), saved.contributors.begin() + i,
                   saved.contributors[i]) > 0) {
      return absl::InvalidArgumentError("row sums: a worker twice");
    }
  }
  index_ = std::move(index);
  ids_ = std::move(saved.ids);
  sums_ = std::move(saved.sums);
  contributors_ = std::move(saved.contributors);
  return absl::OkStatus();
}

}  // namespace pst::ps
