#include "ps_server/store/table_precopy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_chain.h"
#include "common/status_macros.h"

namespace pst::ps {
namespace {

// Each spilled row: id, entry (last, count), then the row's floats.
constexpr size_t kRowHeader = sizeof(int64_t) * 2 + sizeof(double);
constexpr size_t kBufferBytes = size_t{1} << 20;

}  // namespace

// Appends a table's row (its values, then each slot's, `dim` floats each)
// to a hash record, with its index entry (bounded tables).
void AppendRow(common::ShardRecord* r, int64_t dim, int num_slots, int64_t id,
               std::span<const float> row, const EvictionIndex::Entry* e) {
  r->hash_ids.push_back(id);
  if (e != nullptr) {
    r->row_last.push_back(e->last);
    r->row_count.push_back(e->count);
  }
  r->values.insert(r->values.end(), row.begin(), row.begin() + dim);
  for (int sl = 0; sl < num_slots; ++sl) {
    r->slots[sl].insert(r->slots[sl].end(), row.begin() + (sl + 1) * dim,
                        row.begin() + (sl + 2) * dim);
  }
}

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
    AppendRow(&held_, dim_, num_slots_, id, row, entry);
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
    // `*r` folded into the copy as a checkpoint's link is: its rows
    // replace the copy's, and the changed rows it no longer holds go (its
    // ids ascending, as `changed`).
    std::set_difference(changed.begin(), changed.end(), r->hash_ids.begin(), r->hash_ids.end(),
                        std::back_inserter(r->removed_ids));
    held_.spec = r->spec;
    PST_RETURN_IF_ERROR(common::FoldHashRecord(&held_, std::move(*r), "a table's copy"));
    *r = std::move(held_);
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
