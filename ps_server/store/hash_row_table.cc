#include "ps_server/store/hash_row_table.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "ps_server/store/store_internal.h"
#include "ps_server/store/table_cut.h"
#include "spdlog/spdlog.h"

namespace pst::ps {

HashRowTable::HashRowTable(Limits limits, int64_t dim, std::vector<float> slot_initial_values,
                           RowInit init)
    : limits_(limits),
      dim_(dim),
      slot_initial_values_(std::move(slot_initial_values)),
      width_(dim * (1 + static_cast<int64_t>(slot_initial_values_.size()))),
      init_(std::move(init)),
      index_(limits_.policy.bounded() ? std::make_unique<EvictionIndex>(limits_.policy)
                                      : nullptr) {}

HashRowTable::~HashRowTable() {
  if (disk_ == nullptr) return;
  if (absl::Status s = disk_->Clear(disk_table_); !s.ok()) NoteDiskError(s, "deleting its rows");
}

absl::Status HashRowTable::UseDisk(DiskTier* disk, const std::string& name) {
  if (disk == nullptr || index_ == nullptr || limits_.policy.capacity <= 0) {
    return absl::OkStatus();
  }
  // Tables of one name may live side by side (a store being replaced, a
  // backup's copy of a shard): each its own on disk.
  static std::atomic<int64_t> next{0};
  PST_ASSIGN_OR_RETURN(disk_table_,
                       disk->Table(absl::StrCat(name, "#", next.fetch_add(1)), width_));
  disk_ = disk;
  return absl::OkStatus();
}

int64_t HashRowTable::rows_on_disk() const {
  return rows_on_disk_.load(std::memory_order_relaxed);
}

void HashRowTable::SetOnDisk(int64_t id, bool on_disk) {
  if (on_disk) {
    on_disk_.insert(id);
  } else {
    on_disk_.erase(id);
  }
  rows_on_disk_.store(static_cast<int64_t>(on_disk_.size()), std::memory_order_relaxed);
}

void HashRowTable::NoteDiskError(const absl::Status& status, const char* what) const {
  const int64_t n = disk_errors_.fetch_add(1, std::memory_order_relaxed) + 1;
  // The first, then one in a thousand: a full disk fails every eviction.
  if (n == 1 || n % 1000 == 0) {
    spdlog::error("disk tier, {} ({} errors so far): {}", what, n, std::string(status.message()));
  }
}

int64_t HashRowTable::StaleBefore(int64_t now) const {
  return limits_.policy.eviction == common::TablePolicy::Eviction::kTtl
             ? now - limits_.policy.ttl
             : std::numeric_limits<int64_t>::min();
}

bool HashRowTable::Stale(int64_t last, int64_t now) const { return last < StaleBefore(now); }

int HashRowTable::StripeOf(int64_t id) {
  // Hash ids can be anything; mixed, they spread over the stripes evenly.
  return static_cast<int>(store_internal::MixId(id) % kStripes);
}

int64_t HashRowTable::Capacity() const {
  const int64_t capacity = limits_.policy.capacity;
  return capacity > 0 ? std::min(capacity, limits_.max_rows) : limits_.max_rows;
}

absl::Status HashRowTable::NoEvictionsPending() const {
  if (leaving_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      leaving_.size(), " evictions pending: FlushEvictions was not called after a push"));
}

int64_t HashRowTable::Held() const {
  return static_cast<int64_t>(rows_.size() - leaving_.size());
}

bool HashRowTable::Evict(int stripe, int64_t id, bool to_disk) {
  evictions_.fetch_add(1, std::memory_order_relaxed);
  if (to_disk && disk_ != nullptr) {
    // Written with the others at the flush; until then the row stays in
    // rows_ (its data where it was), out of the index.
    leaving_.emplace(id, *index_->Find(stripe, id));
    index_->Forget(stripe, id);
    size_.store(Held(), std::memory_order_relaxed);
    return static_cast<int64_t>(leaving_.size()) < FlushRows() || WriteLeaving();
  }
  index_->Forget(stripe, id);
  if (noting()) NoteChange(id);
  auto it = rows_.find(id);
  // The next row made takes its memory (rows are all width() floats).
  Recycle(std::move(it->second));
  rows_.erase(it);
  size_.store(Held(), std::memory_order_relaxed);
  return true;
}

int64_t HashRowTable::FlushRows() const {
  return std::clamp<int64_t>(limits_.policy.capacity / 16, 1, kMaxFlushRows);
}

void HashRowTable::Recycle(std::vector<float> row) {
  if (static_cast<int64_t>(spares_.size()) < FlushRows()) spares_.push_back(std::move(row));
}

std::vector<float> HashRowTable::NewRow() {
  std::vector<float> row;
  if (!spares_.empty()) {
    row = std::move(spares_.back());
    spares_.pop_back();
  }
  row.resize(static_cast<size_t>(width_));
  return row;
}

bool HashRowTable::FlushEvictions() {
  fetched_.clear();
  return WriteLeaving();
}

bool HashRowTable::WriteLeaving() {
  if (leaving_.empty()) return true;
  std::vector<DiskTier::Row> batch;
  batch.reserve(leaving_.size());
  for (const auto& [id, entry] : leaving_) {
    batch.push_back({id, rows_.find(id)->second, entry.last, entry.count});
  }
  // fresh: on_disk_ says none of these ids is on disk (its bytes, if any,
  // are a stale copy).
  if (absl::Status s = disk_->PutBatch(disk_table_, batch, /*fresh=*/true); !s.ok()) {
    NoteDiskError(s, "evicting rows to it (kept in memory)");
    for (const auto& [id, entry] : leaving_) index_->Load(StripeOf(id), id, entry);
    evictions_.fetch_sub(static_cast<int64_t>(leaving_.size()), std::memory_order_relaxed);
    leaving_.clear();
    size_.store(Held(), std::memory_order_relaxed);
    return false;
  }
  on_disk_.reserve(on_disk_.size() + leaving_.size());
  for (const auto& [id, entry] : leaving_) {
    on_disk_.insert(id);
    auto it = rows_.find(id);
    Recycle(std::move(it->second));
    rows_.erase(it);
  }
  rows_on_disk_.store(static_cast<int64_t>(on_disk_.size()), std::memory_order_relaxed);
  disk_writes_.fetch_add(static_cast<int64_t>(leaving_.size()), std::memory_order_relaxed);
  leaving_.clear();
  return true;
}

void HashRowTable::Prefetch(std::span<const int64_t> ids) {
  if (disk_ == nullptr) return;
  std::vector<int64_t> wanted;
  for (int64_t id : ids) {
    if (!rows_.contains(id) && on_disk_.contains(id) && !fetched_.contains(id)) {
      wanted.push_back(id);
    }
  }
  if (wanted.empty()) return;
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<float> rows(wanted.size() * static_cast<size_t>(width_));
  std::vector<DiskTier::Got> got(wanted.size());
  // A batch that fails as a whole leaves every row to Touch's own read.
  if (!disk_->GetBatch(disk_table_, wanted, rows, got).ok()) return;
  fetched_.reserve(wanted.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    Fetched& f = fetched_[wanted[i]];
    f.got = std::move(got[i]);
    if (f.got.found) {
      f.row.assign(rows.begin() + static_cast<ptrdiff_t>(i * width_),
                   rows.begin() + static_cast<ptrdiff_t>((i + 1) * width_));
    }
  }
}

void HashRowTable::ReadFromDisk(std::span<const int64_t> ids, int64_t now, float* out,
                                std::vector<char>* read) const {
  read->assign(ids.size(), 0);
  if (disk_ == nullptr) return;
  std::vector<size_t> at;
  std::vector<int64_t> wanted;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!rows_.contains(ids[i]) && on_disk_.contains(ids[i])) {
      at.push_back(i);
      wanted.push_back(ids[i]);
    }
  }
  if (wanted.empty()) return;
  std::vector<float> rows(wanted.size() * static_cast<size_t>(width_));
  std::vector<DiskTier::Got> got(wanted.size());
  if (absl::Status s = disk_->GetBatch(disk_table_, wanted, rows, got); !s.ok()) {
    NoteDiskError(s, "reading rows (read as not stored)");
    return;
  }
  for (size_t k = 0; k < wanted.size(); ++k) {
    if (!got[k].status.ok()) {
      NoteDiskError(got[k].status, "reading a row (read as not stored)");
      continue;
    }
    if (!got[k].found || Stale(got[k].last, now)) continue;
    disk_reads_.fetch_add(1, std::memory_order_relaxed);
    std::copy_n(rows.data() + k * width_, dim_, out + at[k] * dim_);
    (*read)[at[k]] = 1;
  }
}

void HashRowTable::EvictBelow(int64_t room) {
  int stripe = 0;
  while (Held() >= room) {
    std::optional<int64_t> victim = index_->Victim(&stripe);
    if (!victim.has_value() || !Evict(stripe, *victim, /*to_disk=*/true)) return;
  }
}

bool HashRowTable::ExpiryDue(int64_t now) const {
  if (index_ == nullptr || limits_.policy.eviction != common::TablePolicy::Eviction::kTtl) {
    return false;
  }
  const int64_t earliest = index_->earliest_update();
  return earliest != INT64_MAX && earliest < now - limits_.policy.ttl;
}

void HashRowTable::Expire(int64_t now) {
  if (!ExpiryDue(now)) return;
  // ttl orders rows by their last update: the stale ones come first.
  int stripe = 0;
  for (std::optional<int64_t> victim = index_->Victim(&stripe); victim.has_value();
       victim = index_->Victim(&stripe)) {
    if (index_->Find(stripe, *victim)->last >= now - limits_.policy.ttl) break;
    Evict(stripe, *victim, /*to_disk=*/false);
  }
  index_->RecomputeEarliest();
}

const float* HashRowTable::Find(int64_t id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : it->second.data();
}

float* HashRowTable::Find(int64_t id) {
  auto it = rows_.find(id);
  return it == rows_.end() ? nullptr : it->second.data();
}

bool HashRowTable::ContainsAll(std::span<const int64_t> ids) const {
  return std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return rows_.contains(id); });
}

bool HashRowTable::ReadStored(int64_t id, int64_t now, std::span<float> out) const {
  if (const float* row = Find(id)) {
    std::copy_n(row, out.size(), out.data());
    return true;
  }
  if (disk_ == nullptr || !on_disk_.contains(id)) return false;
  std::vector<float> row(static_cast<size_t>(width_));
  int64_t last = 0;
  double count = 0;
  absl::StatusOr<bool> got = disk_->Get(disk_table_, id, row, &last, &count);
  if (!got.ok()) {
    NoteDiskError(got.status(), "reading a row (read as not stored)");
    return false;
  }
  if (!*got || Stale(last, now)) return false;
  disk_reads_.fetch_add(1, std::memory_order_relaxed);
  std::copy_n(row.data(), out.size(), out.data());
  return true;
}

bool HashRowTable::CountTouch(int64_t id) {
  const int32_t admit_after = limits_.admit_after;
  if (admit_after <= 1) return true;
  if (!admission_.has_value()) {
    // The size was checked where it was given; the default if it was not.
    absl::StatusOr<AdmissionFilter> made = AdmissionFilter::Create(limits_.admission_filter_bytes);
    admission_ = made.ok() ? *std::move(made)
                           : *AdmissionFilter::Create(AdmissionFilter::kDefaultBytes);
  }
  return admission_->Add(id) >= static_cast<uint32_t>(admit_after);
}

float* HashRowTable::Touch(int64_t id, int64_t t) {
  if (float* row = Find(id)) {
    if (auto leaving = leaving_.find(id); leaving != leaving_.end()) {
      // Evicted by this batch and not written yet: back as from disk.
      const EvictionIndex::Entry entry = leaving->second;
      leaving_.erase(leaving);
      EvictBelow(Capacity());
      size_.store(Held(), std::memory_order_relaxed);
      index_->NoteReturn(StripeOf(id), id, entry, t);
      if (noting()) NoteChange(id);
      return row;
    }
    NoteUpdate(id, t);
    return row;
  }
  if (disk_ != nullptr && on_disk_.contains(id)) {
    std::vector<float> row;
    EvictionIndex::Entry entry;
    // Read, not taken: the bytes stay on disk, stale, until the row's next
    // eviction overwrites them (a delete would cost a write now and slow
    // every later lookup); on_disk_ says they are not the row any more.
    absl::StatusOr<bool> read = false;
    if (auto f = fetched_.find(id); f != fetched_.end()) {
      if (f->second.got.status.ok()) {
        read = f->second.got.found;
        row = std::move(f->second.row);
        entry.last = f->second.got.last;
        entry.count = f->second.got.count;
      } else {
        read = f->second.got.status;
      }
      fetched_.erase(f);
    } else {
      row = NewRow();
      read = disk_->Get(disk_table_, id, row, &entry.last, &entry.count);
    }
    if (!read.ok()) {
      // A value that does not decode stays where it is, reported: this
      // push's gradient for it is dropped rather than a second row made.
      NoteDiskError(read.status(), "bringing a row back (its gradient dropped)");
      refused_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    SetOnDisk(id, false);
    if (*read && !Stale(entry.last, t)) {
      disk_reads_.fetch_add(1, std::memory_order_relaxed);
      EvictBelow(Capacity());
      float* data = Store(id, std::move(row));
      index_->NoteReturn(StripeOf(id), id, entry, t);
      if (noting()) NoteChange(id);
      return data;
    }
  }
  if (!CountTouch(id)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  admissions_.fetch_add(1, std::memory_order_relaxed);
  if (index_ != nullptr && limits_.policy.capacity > 0) EvictBelow(Capacity());
  std::vector<float> row = NewRow();
  init_(id, std::span<float>(row.data(), static_cast<size_t>(dim_)));
  for (size_t s = 0; s < slot_initial_values_.size(); ++s) {
    std::fill_n(row.data() + (s + 1) * dim_, dim_, slot_initial_values_[s]);
  }
  float* data = Store(id, std::move(row));
  NoteUpdate(id, t);
  return data;
}

void HashRowTable::TrackChanges(bool on) {
  tracking_ = on;
  changed_.assign(on ? kStripes : 0, {});
}

HashRowTable::ChangedIds HashRowTable::TakeChanges() {
  ChangedIds taken(tracking_ ? kStripes : 0);
  taken.swap(changed_);
  return taken;
}

void HashRowTable::BeginPrecopy() {
  precopying_ = true;
  precopy_spoiled_ = false;
  precopy_changed_.assign(kStripes, {});
}

std::optional<HashRowTable::ChangedIds> HashRowTable::EndPrecopy() {
  precopying_ = false;
  ChangedIds noted;
  noted.swap(precopy_changed_);
  if (precopy_spoiled_) return std::nullopt;
  return noted;
}

std::vector<int64_t> HashRowTable::MemoryIds() const {
  std::vector<int64_t> ids;
  ids.reserve(rows_.size());
  for (const auto& [id, row] : rows_) ids.push_back(id);
  return ids;
}

float* HashRowTable::Store(int64_t id, std::vector<float> row) {
  float* data = rows_.emplace(id, std::move(row)).first->second.data();
  size_.store(Held(), std::memory_order_relaxed);
  return data;
}

absl::Status HashRowTable::CheckRoom(std::span<const int64_t> ids, const std::string& name) const {
  int64_t fresh = 0;
  for (int64_t id : ids) fresh += rows_.contains(id) ? 0 : 1;
  const int64_t held = size();
  if (index_ != nullptr && limits_.policy.capacity > 0) return absl::OkStatus();  // makes room
  if (fresh > 0 && held + fresh > limits_.max_rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hash embedding '", name, "' holds ", held, " rows and this push would add up to ", fresh,
        "; this ps keeps at most ", limits_.max_rows,
        " rows per table (--max_table_rows); nothing applied"));
  }
  return absl::OkStatus();
}

absl::Status HashRowTable::Replace(Rows rows, int64_t version, const Entries& entries,
                                   std::optional<AdmissionFilter> admission) {
  rows_ = std::move(rows);
  leaving_.clear();
  fetched_.clear();
  if (tracking_) changed_.assign(kStripes, {});
  precopy_spoiled_ = precopying_;
  size_.store(static_cast<int64_t>(rows_.size()));
  admission_ = std::move(admission);
  absl::Status cleared = disk_ == nullptr ? absl::OkStatus() : disk_->Clear(disk_table_);
  on_disk_.clear();
  rows_on_disk_.store(0, std::memory_order_relaxed);
  if (index_ == nullptr) return cleared;
  index_ = std::make_unique<EvictionIndex>(limits_.policy);
  for (const auto& [id, row] : rows_) {
    auto entry = entries.find(id);
    if (entry != entries.end()) {
      index_->Load(StripeOf(id), id, entry->second);
    } else {
      index_->Note(StripeOf(id), id, version);
    }
  }
  // Should the tier have failed to empty the table, every write to it fails
  // too: the rows stay in memory.
  if (!cleared.ok()) NoteDiskError(cleared, "emptying it for a restore");
  if (limits_.policy.capacity > 0) EvictBelow(Capacity() + 1);
  if (disk_ != nullptr) FlushEvictions();
  return cleared;
}

void HashRowTable::LoadRow(int64_t id, const char* bytes, const EvictionIndex::Entry& entry) {
  precopy_spoiled_ |= precopying_;
  leaving_.erase(id);  // loaded in place of what was evicted
  std::vector<float>& held = rows_[id];
  held.resize(static_cast<size_t>(width_));
  std::memcpy(held.data(), bytes, held.size() * sizeof(float));
  size_.store(Held());
  if (index_ == nullptr) return;
  index_->Load(StripeOf(id), id, entry);
  if (disk_ != nullptr) EvictBelow(Capacity() + 1);
}

absl::Status HashRowTable::ForEachRow(int64_t now, RowFn fn) const {
  PST_RETURN_IF_ERROR(NoEvictionsPending());
  for (const auto& [id, row] : rows_) {
    PST_RETURN_IF_ERROR(fn(id, row, IndexEntry(id)));
  }
  if (disk_ == nullptr) return absl::OkStatus();
  return disk_->ForEach(
      disk_table_,
      [&](int64_t id, std::span<const float> row, int64_t last, double count) -> absl::Status {
        // Stale bytes of a row brought back, or gone as ttl would have taken it.
        if (!on_disk_.contains(id) || Stale(last, now)) return absl::OkStatus();
        const EvictionIndex::Entry entry{last, count, 0.0};
        return fn(id, row, &entry);
      });
}

absl::Status HashRowTable::ForRows(std::span<const int64_t> ids, int64_t now, RowFn fn,
                                   std::vector<int64_t>* gone) const {
  PST_RETURN_IF_ERROR(NoEvictionsPending());
  std::vector<int64_t> wanted;  // on disk
  for (int64_t id : ids) {
    if (!rows_.contains(id) && on_disk_.contains(id)) wanted.push_back(id);
  }
  std::vector<float> disk_rows(wanted.size() * static_cast<size_t>(width_));
  std::vector<DiskTier::Got> got(wanted.size());
  if (!wanted.empty()) {
    PST_RETURN_IF_ERROR(disk_->GetBatch(disk_table_, wanted, disk_rows, got));
  }
  size_t k = 0;  // the next of `wanted`, which keeps the order of `ids`
  for (int64_t id : ids) {
    if (const float* row = Find(id)) {
      PST_RETURN_IF_ERROR(
          fn(id, std::span<const float>(row, static_cast<size_t>(width_)), IndexEntry(id)));
      continue;
    }
    if (k < wanted.size() && wanted[k] == id) {
      const DiskTier::Got& g = got[k];
      const std::span<const float> row(disk_rows.data() + k * width_, static_cast<size_t>(width_));
      ++k;
      PST_RETURN_IF_ERROR(g.status);
      // Gone as ttl would have taken it: as ForEachRow, which skips it.
      if (g.found && !Stale(g.last, now)) {
        const EvictionIndex::Entry entry{g.last, g.count, 0.0};
        PST_RETURN_IF_ERROR(fn(id, row, &entry));
        continue;
      }
    }
    gone->push_back(id);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TableCut>> HashRowTable::Cut(
    int64_t now, std::shared_ptr<DiskTier> tier) const {
  if (disk_ == nullptr || tier.get() != disk_) {
    return absl::FailedPreconditionError("a cut of a table without its disk tier");
  }
  PST_RETURN_IF_ERROR(NoEvictionsPending());
  PST_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier::Scratch> scratch, disk_->NewScratch(width_));
  // The owner's lock keeps the table still from here until the scratch
  // table is sealed: both views are of one instant.
  PST_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier::View> on_disk, disk_->Pin(disk_table_));
  constexpr size_t kBatch = 1024;
  std::vector<DiskTier::Row> batch;
  batch.reserve(kBatch);
  for (const auto& [id, row] : rows_) {
    const EvictionIndex::Entry* e = IndexEntry(id);
    batch.push_back({id, row, e == nullptr ? now : e->last, e == nullptr ? 0.0 : e->count});
    if (batch.size() == kBatch) {
      PST_RETURN_IF_ERROR(scratch->Put(batch));
      batch.clear();
    }
  }
  PST_RETURN_IF_ERROR(scratch->Put(batch));
  // Without ttl every id on disk is a row held, and the count is known
  // now; with it, rows on disk may have gone since, and the stream counts
  // (this is then a bound).
  const auto held = static_cast<int64_t>(rows_.size() + on_disk_.size());
  std::optional<int64_t> rows;
  if (limits_.policy.eviction != common::TablePolicy::Eviction::kTtl) rows = held;
  return std::make_unique<TableCut>(std::move(tier), scratch->Seal(), std::move(on_disk),
                                    StaleBefore(now), rows, held);
}

}  // namespace pst::ps
