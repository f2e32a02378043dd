// The rows of one hash embedding (one partition of it) and their admission:
// id -> the row's values then each optimizer slot's, made on the
// admit_after-th touch of the id (the first with admit_after <= 1).
//
// Admission counts touches in an AdmissionFilter of
// Limits::admission_filter_bytes (allocated on the first count): fixed
// memory however many ids the table sees; an id may be admitted early (its
// counters shared with others), never late. An admitted id's counts stay:
// evicted, it comes back as soon as it is touched again.
//
// Bounded (Limits::policy, common/table_policy.h): updates are noted in an
// EvictionIndex; a row made when the table holds its capacity first makes
// room, the policy's first rows going; with ttl, rows not updated for
// `ttl` versions go (Expire, called before a read or an update at a
// version past ExpiryDue). A row that goes is forgotten, slots and all: it
// starts again from the RowInit (admission's counts of its id stay). Updates
// are noted by the callers that apply them (Touch, NoteUpdate), pushes
// only: a read changes no order, so that a backup, which sees the pushes
// but not the reads, goes through the same states as its primary.
//
// With a disk tier (UseDisk; bounded tables with a capacity), a row the
// capacity pushes out of memory goes to disk with its slots and its index
// entry, and a push of it brings it back exactly as it left: rows are never
// forgotten for room, only by ttl. A read of a row on disk reads it there
// (ReadStored) without bringing it back, so that reads change nothing, as
// above. An id is in one tier at a time: the table keeps the set of its ids
// on disk, so that no other id's lookup reaches the disk, and a row brought
// back leaves stale bytes there, skipped, until its next eviction
// overwrites them. The disk I/O of a push is batched: Prefetch reads the
// push's rows on disk in one lookup before its Touches, and the rows its
// Touches evict are written together (at most FlushRows() wait, still in
// memory but out of the index) by FlushEvictions, which the owner calls
// before it lets go of its exclusive lock; a row evicted and touched again
// before that comes back without the disk. ttl reaches rows on disk lazily:
// one last updated before `now` - ttl reads, and is brought back, as gone.
// A disk error (disk full, I/O) loses no row: one that cannot be written
// stays in memory, past the capacity; one that cannot be read back stays
// on disk (its push's gradient dropped); each error is counted and logged.
//
// Change tracking (TrackChanges; incremental checkpoints): while on, the id
// of every row that changes is noted, in its stripe's set: updated, made,
// brought back from disk, or removed (evicted or expired; moved to disk is
// no change), until TakeChanges. Replace forgets the notes. A save's
// pre-copy (BeginPrecopy, EndPrecopy) notes them the same way, apart.
//
// Thread-safety: thread-compatible. Its owner (Variable::mu) guards it:
// const methods under the lock held shared, the others held exclusively,
// but NoteUpdate, which the owner may call with its lock held shared and
// the row's stripe (StripeOf) held exclusively, and ReadStored, under the
// lock held shared and the row's stripe held shared. size(), the figures and
// ExpiryDue() may be read without the lock.
#ifndef PST_PS_SERVER_STORE_HASH_ROW_TABLE_H_
#define PST_PS_SERVER_STORE_HASH_ROW_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/checkpoint_format.h"
#include "common/table_policy.h"
#include "ps_server/store/admission_filter.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/eviction_index.h"
#include "ps_server/store/table_cut.h"

namespace pst::ps {

class HashRowTable {
 public:
  struct Limits {
    int32_t admit_after = 1;  // touches that make a row; <= 1: the first
    // Checked by AdmissionFilter::Create (the ps's --admission_filter_bytes).
    int64_t admission_filter_bytes = AdmissionFilter::kDefaultBytes;
    int64_t max_rows = int64_t{1} << 26;  // CheckRoom; a bound on capacity too
    common::TablePolicy policy;           // none: rows are never evicted
  };
  static constexpr int kStripes = EvictionIndex::kStripes;
  // Writes the `dim` values a new row of `id` starts with.
  using RowInit = std::function<void(int64_t id, std::span<float> values)>;
  using Rows = absl::flat_hash_map<int64_t, std::vector<float>>;
  // Index entries by id (restore).
  using Entries = absl::flat_hash_map<int64_t, EvictionIndex::Entry>;

  // Rows of `dim` values, started by `init`, each followed by one slot of
  // `dim` floats per entry of `slot_initial_values`, started at it.
  HashRowTable(Limits limits, int64_t dim, std::vector<float> slot_initial_values, RowInit init);
  // Deletes the table's rows on disk.
  ~HashRowTable();
  HashRowTable(const HashRowTable&) = delete;
  HashRowTable& operator=(const HashRowTable&) = delete;

  // Keeps the rows past the capacity in `disk` (which must outlive the
  // table), as a table of its own named after `name`. Nothing for a table
  // with no capacity. Call before the first row is stored. Errors: the
  // tier's, making the table.
  absl::Status UseDisk(DiskTier* disk, const std::string& name);
  bool has_disk() const { return disk_ != nullptr; }

  const Limits& limits() const { return limits_; }
  int64_t dim() const { return dim_; }
  // Floats per row: its values, then each slot.
  int64_t width() const { return width_; }
  // Rows held; may be read without the owner's lock (relaxed).
  int64_t size() const { return size_.load(std::memory_order_relaxed); }
  // Rows that went, by the policy, since the table was made.
  int64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }
  // Rows made by pushes (ids admitted), and pushed rows of ids not
  // admitted yet (their gradients dropped), since the table was made.
  int64_t admissions() const { return admissions_.load(std::memory_order_relaxed); }
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // The disk tier: rows on disk now (ttl's stale ones included until their
  // id is pushed again, or a restore), rows read there (pulled or brought back) and written
  // there (evicted to it), and the disk errors (each logged) since the table
  // was made.
  int64_t rows_on_disk() const;
  int64_t disk_reads() const { return disk_reads_.load(std::memory_order_relaxed); }
  int64_t disk_writes() const { return disk_writes_.load(std::memory_order_relaxed); }
  int64_t disk_errors() const { return disk_errors_.load(std::memory_order_relaxed); }
  bool bounded() const { return index_ != nullptr; }
  // The row stripe of `id` (Variable's locks, the EvictionIndex's stripes).
  static int StripeOf(int64_t id);

  // The row of `id` (width() floats) in memory, or nullptr when none is.
  const float* Find(int64_t id) const;
  float* Find(int64_t id);
  bool Contains(int64_t id) const { return rows_.contains(id); }
  bool ContainsAll(std::span<const int64_t> ids) const;

  // Copies the dim() values of `id`'s row, in memory or on disk, into
  // `out`; false (`out` unspecified) when neither tier holds it as of
  // version `now`. Changes nothing.
  bool ReadStored(int64_t id, int64_t now, std::span<float> out) const;
  // ReadStored of the `ids` on disk, in one batched read: (*read)[i] is
  // true, with out[i * dim(), (i + 1) * dim()) written, for each id read
  // there as held at `now`; false for the others (in memory, in neither
  // tier, or a disk error, counted). Under the owner's lock held shared;
  // no stripe's: it reads no row in memory.
  void ReadFromDisk(std::span<const int64_t> ids, int64_t now, float* out,
                    std::vector<char>* read) const;

  // Counts a touch of `id` (a read, or a push of an id with no row); whether
  // it is admitted now. Always true with admit_after <= 1.
  bool CountTouch(int64_t id);
  // The row of `id`, to be updated at version `t`: counting a touch and
  // bringing it back from disk, or else making it (from the RowInit) once
  // admitted, after making room; nullptr while not admitted. Notes the
  // update.
  float* Touch(int64_t id, int64_t t);
  // Reads the rows of `ids` on disk in one batched lookup, for the Touches
  // that follow (a push's); FlushEvictions drops what was not used. A
  // failed read leaves each row to Touch's own.
  void Prefetch(std::span<const int64_t> ids);
  // Writes the rows evicted since the last flush to disk, in one batch,
  // and drops what Prefetch read. The owner calls it after a run of Touch
  // or LoadRow, before it lets go of its exclusive lock: until then those
  // rows are still in memory, out of the index, and ForEachRow and Cut
  // refuse (FailedPrecondition). false: the disk refused them (counted and
  // logged); they stay in memory, past the capacity.
  bool FlushEvictions();
  // Notes an update at version `t` of the stored row `id`.
  void NoteUpdate(int64_t id, int64_t t) {
    if (index_ != nullptr) index_->Note(StripeOf(id), id, t);
    if (noting()) NoteChange(id);
  }
  // Change tracking: on starts noting (with no note), off forgets them.
  void TrackChanges(bool on);
  bool tracks_changes() const { return tracking_; }
  // The ids of the rows changed since the last take (or since tracking
  // began), one set per stripe, and starts anew.
  using ChangedIds = std::vector<absl::flat_hash_set<int64_t>>;
  ChangedIds TakeChanges();
  // A save's copy of the rows in memory taken while pushes go on (Variable::
  // CopyStoredRows, VariableStore::Snapshot): BeginPrecopy starts noting
  // changed rows for it, apart from TrackChanges'; EndPrecopy gives them
  // and stops, or nullopt when rows were replaced or loaded since (a
  // restore, a state transfer: the copy is worthless). The ids in memory,
  // for the copy: MemoryIds.
  void BeginPrecopy();
  std::optional<ChangedIds> EndPrecopy();
  std::vector<int64_t> MemoryIds() const;
  // ttl: whether some row may be due to go at version `now` (may say so
  // when none is; never misses one).
  bool ExpiryDue(int64_t now) const;
  // ttl: removes the rows last updated before `now` - ttl.
  void Expire(int64_t now);
  // The index's entry of stored row `id` (bounded tables), or nullptr.
  const EvictionIndex::Entry* IndexEntry(int64_t id) const {
    return index_ == nullptr ? nullptr : index_->Find(StripeOf(id), id);
  }
  // The dim() values `id`'s row starts with, into `out`.
  void InitialValues(int64_t id, std::span<float> out) const { init_(id, out); }

  // ResourceExhausted, naming `name`, when storing the `ids` not stored yet
  // would take the table past Limits::max_rows (never with a capacity: it
  // makes room).
  absl::Status CheckRoom(std::span<const int64_t> ids, const std::string& name) const;

  // The state as it is, for snapshots and state transfer: calls `fn` on
  // every row held as of version `now`, in memory then on disk, with its
  // index entry (nullptr for an unbounded table). Stops at, and returns,
  // `fn`'s first error or the disk tier's.
  using RowFn = absl::FunctionRef<absl::Status(int64_t id, std::span<const float> row,
                                               const EvictionIndex::Entry* entry)>;
  absl::Status ForEachRow(int64_t now, RowFn fn) const;
  // ForEachRow of the rows of `ids` only (an incremental snapshot's, each
  // once, ascending), those on disk read in one batch; `gone` gets, in
  // order, the ids neither tier holds as of `now`. Errors: as ForEachRow's;
  // the disk tier's, reading.
  absl::Status ForRows(std::span<const int64_t> ids, int64_t now, RowFn fn,
                       std::vector<int64_t>* gone) const;
  // A save's cut of a table with a disk tier (has_disk()), as of version
  // `now` (table_cut.h): the rows in memory are written to a scratch table
  // of the tier, and both tiers pinned, so that the rows are streamed
  // later, without the owner's lock and without a copy in RAM. `tier` is
  // the DiskTier UseDisk was given, which the stream keeps alive. Errors:
  // the tier's.
  absl::StatusOr<std::unique_ptr<TableCut>> Cut(int64_t now,
                                                 std::shared_ptr<DiskTier> tier) const;
  // The rows held in memory.
  const Rows& rows() const { return rows_; }
  // The admission counts (null before the first count).
  const AdmissionFilter* admission() const {
    return admission_.has_value() ? &*admission_ : nullptr;
  }

  // Loaders (restore, state transfer). Replace swaps in every row, in
  // place of both tiers', with its entry in `entries` (bounded tables; last
  // updated at `version` when it has none), then lets the policy's first
  // rows go (to disk with one) past the capacity, and takes `admission`'s
  // touch counts (none: forgets them); errors: the disk tier's, emptying
  // it (the rows it cannot take stay in memory). LoadRow adds to what is there,
  // moving the policy's first rows to disk past the capacity.
  absl::Status Replace(Rows rows, int64_t version, const Entries& entries = {},
                       std::optional<AdmissionFilter> admission = std::nullopt);
  // `bytes`: width() little-endian floats; `entry`: the index's (bounded).
  void LoadRow(int64_t id, const char* bytes, const EvictionIndex::Entry& entry);
  // Replaces the touch counts with `filter`'s.
  void LoadAdmission(AdmissionFilter filter) { admission_ = std::move(filter); }

 private:
  // The rows the table may hold: the capacity (at most max_rows), or
  // max_rows when it has none.
  int64_t Capacity() const;
  // Rows held: in memory, less those leaving.
  int64_t Held() const;
  // Evictions that wait for one write, at most (1/16 of the capacity, so
  // that memory exceeds it by little).
  int64_t FlushRows() const;
  static constexpr int64_t kMaxFlushRows = 512;
  // Removes row `id` (of stripe `stripe`), counting an eviction: from
  // memory now, or else (to disk, when `to_disk` and the table has one)
  // from the index now and from memory once written (WriteLeaving, done
  // here when FlushRows() wait); false when that write fails.
  bool Evict(int stripe, int64_t id, bool to_disk);
  // Writes the leaving rows (FlushEvictions' part).
  bool WriteLeaving();
  // FailedPrecondition while rows are leaving.
  absl::Status NoEvictionsPending() const;
  // A row's memory: one an eviction freed, or new; width() floats.
  std::vector<float> NewRow();
  void Recycle(std::vector<float> row);
  // Puts `row` in memory as `id`'s (not held yet); its data.
  float* Store(int64_t id, std::vector<float> row);
  // Evicts the policy's first rows until fewer than `room` are held (or
  // the disk refuses one).
  void EvictBelow(int64_t room);
  // ttl: whether a row last updated at `last` is gone at version `now`:
  // whether `last` < StaleBefore(now) (the lowest int64 without ttl).
  bool Stale(int64_t last, int64_t now) const;
  int64_t StaleBefore(int64_t now) const;
  // Notes that `id`'s row is on disk now, or not.
  void SetOnDisk(int64_t id, bool on_disk);
  // Counts and logs a disk tier error.
  void NoteDiskError(const absl::Status& status, const char* what) const;
  // Whether changes are noted (tracking, or a pre-copy).
  bool noting() const { return tracking_ || precopying_; }
  // Notes a change of row `id` where it is noted.
  void NoteChange(int64_t id) {
    const size_t stripe = static_cast<size_t>(StripeOf(id));
    if (tracking_) changed_[stripe].insert(id);
    if (precopying_) precopy_changed_[stripe].insert(id);
  }

  const Limits limits_;
  const int64_t dim_;
  const std::vector<float> slot_initial_values_;
  const int64_t width_;
  const RowInit init_;
  Rows rows_;
  // Evicted rows' memory, for the next rows made (every value written
  // there before use): a full bounded table makes as many rows as it
  // evicts, without a free and an allocation each. At most FlushRows().
  std::vector<std::vector<float>> spares_;
  // Rows evicted to disk and not written yet (in rows_, not in the index),
  // with their index entries.
  absl::flat_hash_map<int64_t, EvictionIndex::Entry> leaving_;
  // Rows on disk read by Prefetch, until Touch takes them.
  struct Fetched {
    std::vector<float> row;
    DiskTier::Got got;
  };
  absl::flat_hash_map<int64_t, Fetched> fetched_;
  std::atomic<int64_t> size_{0};
  std::atomic<int64_t> evictions_{0};
  std::atomic<int64_t> admissions_{0};
  std::atomic<int64_t> refused_{0};
  std::unique_ptr<EvictionIndex> index_;  // bounded tables only
  std::optional<AdmissionFilter> admission_;  // made on the first count
  DiskTier* disk_ = nullptr;  // UseDisk
  DiskTier::TableHandle disk_table_;
  // The ids whose rows are on disk: a lookup of any other id (new, or in
  // memory) never reaches RocksDB, and a row written there is known to be
  // fresh. About 16 bytes an id, against the row's width() * 4 and more.
  absl::flat_hash_set<int64_t> on_disk_;
  std::atomic<int64_t> rows_on_disk_{0};  // on_disk_.size(), read without the lock
  mutable std::atomic<int64_t> disk_reads_{0};  // ReadStored is const
  std::atomic<int64_t> disk_writes_{0};
  mutable std::atomic<int64_t> disk_errors_{0};
  // Change tracking: on or off (changed under the owner's lock held
  // exclusively), and the ids noted, by stripe (each under its stripe's
  // lock as NoteUpdate is).
  bool tracking_ = false;
  ChangedIds changed_;
  // A pre-copy's notes, as the tracking's; `precopy_spoiled_`: rows were
  // replaced or loaded during it.
  bool precopying_ = false;
  bool precopy_spoiled_ = false;
  ChangedIds precopy_changed_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_HASH_ROW_TABLE_H_
