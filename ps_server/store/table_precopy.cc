#include "ps_server/store/table_precopy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pst::ps {
namespace {

// `*r`, a hash record of the rows changed during a pre-copy, made whole
// from the pre-copy `copy`: a changed row the copy has is overwritten in
// place (or, gone at the instant, replaced by the copy's last row), and one
// it lacks appended. One pass over the copy's ids, then work for the
// changed rows only.
void MergePrecopy(common::ShardRecord&& copy, const std::vector<int64_t>& changed, int64_t dim,
                  common::ShardRecord* r) {
  const size_t d = static_cast<size_t>(dim);
  const bool entries = !copy.row_last.empty();
  // Where each changed id is in the copy, and in `r`.
  absl::flat_hash_map<int64_t, size_t> in_copy;
  in_copy.reserve(changed.size());
  for (int64_t id : changed) in_copy.emplace(id, SIZE_MAX);
  for (size_t k = 0; k < copy.hash_ids.size(); ++k) {
    if (auto it = in_copy.find(copy.hash_ids[k]); it != in_copy.end()) it->second = k;
  }
  auto put = [&](size_t to, size_t from) {  // row `from` of r into row `to` of the copy
    copy.hash_ids[to] = r->hash_ids[from];
    std::copy_n(r->values.begin() + from * d, d, copy.values.begin() + to * d);
    for (size_t s = 0; s < copy.slots.size(); ++s) {
      std::copy_n(r->slots[s].begin() + from * d, d, copy.slots[s].begin() + to * d);
    }
    if (entries) {
      copy.row_last[to] = r->row_last[from];
      copy.row_count[to] = r->row_count[from];
    }
  };
  auto grow = [&]() {
    copy.hash_ids.push_back(0);
    copy.values.resize(copy.values.size() + d);
    for (std::vector<float>& slot : copy.slots) slot.resize(slot.size() + d);
    if (entries) {
      copy.row_last.push_back(0);
      copy.row_count.push_back(0);
    }
    return copy.hash_ids.size() - 1;
  };
  for (size_t k = 0; k < r->hash_ids.size(); ++k) {
    auto it = in_copy.find(r->hash_ids[k]);
    const bool there = it != in_copy.end() && it->second != SIZE_MAX;
    put(there ? it->second : grow(), k);
    if (it != in_copy.end()) it->second = SIZE_MAX - 1;  // written: stays
  }
  // The changed rows the copy has that are gone at the instant: each
  // replaced by the copy's last row, whose place is kept up to date.
  std::vector<size_t> gone;
  for (const auto& [id, at] : in_copy) {
    if (at < SIZE_MAX - 1) gone.push_back(at);
  }
  std::sort(gone.rbegin(), gone.rend());  // from the back, so that no last row is one to go
  for (size_t at : gone) {
    const size_t last = copy.hash_ids.size() - 1;
    if (at != last) {
      copy.hash_ids[at] = copy.hash_ids[last];
      std::copy_n(copy.values.begin() + last * d, d, copy.values.begin() + at * d);
      for (std::vector<float>& slot : copy.slots) {
        std::copy_n(slot.begin() + last * d, d, slot.begin() + at * d);
      }
      if (entries) {
        copy.row_last[at] = copy.row_last[last];
        copy.row_count[at] = copy.row_count[last];
      }
    }
    copy.hash_ids.pop_back();
    copy.values.resize(copy.values.size() - d);
    for (std::vector<float>& slot : copy.slots) slot.resize(slot.size() - d);
    if (entries) {
      copy.row_last.pop_back();
      copy.row_count.pop_back();
    }
  }
  r->hash_ids = std::move(copy.hash_ids);
  r->values = std::move(copy.values);
  r->slots = std::move(copy.slots);
  r->row_last = std::move(copy.row_last);
  r->row_count = std::move(copy.row_count);
  r->rows = static_cast<int64_t>(r->hash_ids.size());
}

// Each spilled row: id, entry (last, count), then the row's floats.
constexpr size_t kRowHeader = sizeof(int64_t) * 2 + sizeof(double);
constexpr size_t kBufferBytes = size_t{1} << 20;

}  // namespace

// The spill file (unlinked: it goes with its descriptor), the ids it holds
// in order, and whether its rows have entries.
struct TablePrecopy::Spill {
  int fd = -1;
  std::string dir;
  std::vector<int64_t> ids;
  bool entries = false;
  std::vector<char> buffer;
  uint64_t written = 0;
  ~Spill() {
    if (fd >= 0) ::close(fd);
  }
  absl::Status Flush() {
    size_t done = 0;
    while (done < buffer.size()) {
      const ssize_t n = ::pwrite(fd, buffer.data() + done, buffer.size() - done,
                                 static_cast<off_t>(written + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::InternalError(
            absl::StrCat("writing a table's copy for a save in ", dir, ": ", std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
    written += buffer.size();
    buffer.clear();
    return absl::OkStatus();
  }
};

namespace {

// The rows of a spilled copy but the changed ones, then the rows copied
// again at the instant: a table as at the instant, read from the file.
class SpilledRows final : public common::ShardRowStream {
 public:
  SpilledRows(std::shared_ptr<const TablePrecopy::Spill> spill, std::vector<int64_t> changed,
              common::ShardRecord again, int64_t dim, int num_slots)
      : spill_(std::move(spill)),
        changed_(std::move(changed)),
        again_(std::move(again)),
        dim_(static_cast<size_t>(dim)),
        width_(dim_ * static_cast<size_t>(1 + num_slots)) {
    for (int64_t id : spill_->ids) rows_ += IsChanged(id) ? 0 : 1;
    rows_ += static_cast<int64_t>(again_.hash_ids.size());
  }

  absl::StatusOr<int64_t> Count() const override { return rows_; }

  absl::Status ForEach(RowFn fn) const override {
    const size_t row_bytes = kRowHeader + width_ * sizeof(float);
    std::vector<char> buffer(std::max(kBufferBytes / row_bytes, size_t{1}) * row_bytes);
    std::vector<float> row(width_);
    uint64_t offset = 0;
    const uint64_t end = static_cast<uint64_t>(spill_->ids.size()) * row_bytes;
    while (offset < end) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), end - offset));
      size_t got = 0;
      while (got < want) {
        const ssize_t n =
            ::pread(spill_->fd, buffer.data() + got, want - got, static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          return absl::InternalError(absl::StrCat("reading a table's copy for a save in ",
                                                  spill_->dir, ": ",
                                                  n == 0 ? "cut short" : std::strerror(errno)));
        }
        got += static_cast<size_t>(n);
      }
      for (size_t at = 0; at < want; at += row_bytes) {
        int64_t id = 0, last = 0;
        double count = 0;
        std::memcpy(&id, buffer.data() + at, sizeof(id));
        if (IsChanged(id)) continue;
        std::memcpy(&last, buffer.data() + at + 8, sizeof(last));
        std::memcpy(&count, buffer.data() + at + 16, sizeof(count));
        std::memcpy(row.data(), buffer.data() + at + kRowHeader, width_ * sizeof(float));
        PST_RETURN_IF_ERROR(fn(id, row, last, count));
      }
      offset += want;
    }
    for (size_t k = 0; k < again_.hash_ids.size(); ++k) {
      std::copy_n(again_.values.begin() + k * dim_, dim_, row.begin());
      for (size_t s = 0; s < again_.slots.size(); ++s) {
        std::copy_n(again_.slots[s].begin() + k * dim_, dim_, row.begin() + (s + 1) * dim_);
      }
      const bool entry = !again_.row_last.empty();
      PST_RETURN_IF_ERROR(fn(again_.hash_ids[k], row, entry ? again_.row_last[k] : 0,
                             entry ? again_.row_count[k] : 0.0));
    }
    return absl::OkStatus();
  }

 private:
  bool IsChanged(int64_t id) const {
    return std::binary_search(changed_.begin(), changed_.end(), id);
  }
  const std::shared_ptr<const TablePrecopy::Spill> spill_;
  const std::vector<int64_t> changed_;
  const common::ShardRecord again_;
  const size_t dim_, width_;
  int64_t rows_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TablePrecopy>> TablePrecopy::Create(const std::string& spill_dir,
                                                                   int64_t dim, int num_slots) {
  auto precopy = std::unique_ptr<TablePrecopy>(new TablePrecopy(dim, num_slots));
  if (spill_dir.empty()) {
    precopy->held_.slots.assign(num_slots, {});
    return precopy;
  }
  auto spill = std::make_shared<Spill>();
  spill->dir = spill_dir;
  std::string path = spill_dir + "/.table-copy-XXXXXX";
  spill->fd = ::mkstemp(path.data());
  if (spill->fd < 0) {
    return absl::InternalError(absl::StrCat("cannot make a file for a table's copy in ", spill_dir,
                                            ": ", std::strerror(errno)));
  }
  ::unlink(path.c_str());  // gone with its descriptor, whatever happens
  precopy->spill_ = std::move(spill);
  return precopy;
}

TablePrecopy::~TablePrecopy() = default;

absl::Status TablePrecopy::Add(int64_t id, std::span<const float> row,
                               const EvictionIndex::Entry* entry) {
  const size_t width = static_cast<size_t>(dim_ * (1 + num_slots_));
  if (spill_ == nullptr) {
    held_.hash_ids.push_back(id);
    if (entry != nullptr) {
      held_.row_last.push_back(entry->last);
      held_.row_count.push_back(entry->count);
    }
    held_.values.insert(held_.values.end(), row.begin(), row.begin() + dim_);
    for (int s = 0; s < num_slots_; ++s) {
      held_.slots[s].insert(held_.slots[s].end(), row.begin() + (s + 1) * dim_,
                            row.begin() + (s + 2) * dim_);
    }
    return absl::OkStatus();
  }
  Spill& spill = *spill_;
  spill.ids.push_back(id);
  spill.entries |= entry != nullptr;
  const int64_t last = entry != nullptr ? entry->last : 0;
  const double count = entry != nullptr ? entry->count : 0;
  const size_t at = spill.buffer.size();
  spill.buffer.resize(at + kRowHeader + width * sizeof(float));
  std::memcpy(spill.buffer.data() + at, &id, sizeof(id));
  std::memcpy(spill.buffer.data() + at + 8, &last, sizeof(last));
  std::memcpy(spill.buffer.data() + at + 16, &count, sizeof(count));
  std::memcpy(spill.buffer.data() + at + kRowHeader, row.data(), width * sizeof(float));
  return spill.buffer.size() >= kBufferBytes ? spill.Flush() : absl::OkStatus();
}

absl::Status TablePrecopy::Complete(std::vector<int64_t> changed, common::ShardRecord* r) {
  if (spill_ == nullptr) {
    MergePrecopy(std::move(held_), changed, dim_, r);
    return absl::OkStatus();
  }
  PST_RETURN_IF_ERROR(spill_->Flush());
  const bool entries = spill_->entries || !r->row_last.empty();
  common::ShardRecord again;
  again.hash_ids = std::move(r->hash_ids);
  again.values = std::move(r->values);
  again.slots = std::move(r->slots);
  again.row_last = std::move(r->row_last);
  again.row_count = std::move(r->row_count);
  r->hash_ids.clear();
  r->values.clear();
  r->slots.clear();
  r->row_last.clear();
  r->row_count.clear();
  r->rows = 0;
  r->stream = std::make_shared<SpilledRows>(std::move(spill_), std::move(changed), std::move(again),
                                            dim_, num_slots_);
  r->stream_slots = num_slots_;
  r->stream_entries = entries;
  return absl::OkStatus();
}

}  // namespace pst::ps
