// The disk tier of bounded hash tables: the rows a ps does not keep in
// memory, in one RocksDB database per ps under a local directory
// (--table_store_dir). A row that goes to disk carries its slots and its
// EvictionIndex entry; a row brought back (Take) lives in memory only.
//
// Not durable, by design: the WAL is off and a ps starting or restoring
// starts from an empty tier (Options::wipe_on_open); the checkpoint is the
// durability. What a crash loses of the tier, the restore rebuilds.
//
// Layout on disk:
//   column family  one per table partition, named "t" + the hex of the
//                  variable's name (names are arbitrary bytes; RocksDB
//                  writes its family names into a text OPTIONS file);
//                  "default" is left empty.
//   key            8 bytes, big-endian, of the id as uint64 with its sign
//                  bit flipped: byte order is int64 order, so iteration is
//                  in id order, negative ids first.
//   value          header: uint32 format version (kFormatVersion), uint32
//                  width (floats per row); then `width` floats, then the
//                  entry's int64 last and double count; all little-endian.
// A value of the wrong size, version or width reads back as DataLoss
// naming the table and the id.
//
// Tuned for point lookups, what a push or pull of a row on disk does:
// memtables are hash tables of linked lists (up to 2^16 buckets) keyed by
// the whole key, not one skip list, so a lookup or a write there costs a
// hash and a short list (in bench/hash_table_bench's first workload, about
// twice the rows/s of the default skip list, and 1.15-1.25x those of hash
// tables of skip lists, used before); SST files carry bloom filters
// and a hash index in each data block. The price is paid by ForEach, the
// scan of a save, and by the flush: each sorts a memtable's entries first.
// GetBatch reads many rows in one MultiGet.
//
// A save reads a table as of one instant while training goes on: Pin gives
// a View of it (a RocksDB snapshot, which even Clear leaves readable), and
// a Scratch table holds what the save copies out of memory at that instant
// (the rows a bounded table holds in memory), on disk rather than in RAM.
//
// Thread-safety: a DiskTier is safe for concurrent access from many threads
// without external synchronization, with two caller duties:
//   * calls on the same id of one table must not overlap (the owner's row
//     stripe lock serializes them): Put and Take read, then write, to keep
//     Count exact;
//   * Clear(t) must not overlap any other call on table t (Pin included).
// ForEach reads a snapshot: writes may go on while it runs.
// TableHandles stay valid for the DiskTier's life. Views and Scratch tables
// must not outlive their DiskTier; each is thread-compatible, and reads
// from a View may overlap any call on the tier.
#ifndef PST_PS_SERVER_STORE_DISK_TIER_H_
#define PST_PS_SERVER_STORE_DISK_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Snapshot;
}  // namespace rocksdb

namespace pst::ps {

class DiskTier {
 public:
  static constexpr uint32_t kFormatVersion = 1;

  struct Options {
    // LRU cache of SST blocks, shared by every table (--table_store_cache_bytes).
    int64_t block_cache_bytes = int64_t{64} << 20;
    // Memtables of every table together, before they flush to SSTs.
    int64_t write_buffer_bytes = int64_t{64} << 20;
    // Drops every table found in the directory: a ps starting or
    // restoring starts from an empty tier. Else tables found are kept
    // (rows counted at Open) and take the width of their first Table()
    // call; values of another width read as DataLoss.
    bool wipe_on_open = true;
    // LZ4 on SST blocks. Off by default: float rows barely compress, and
    // bench/disk_tier_bench measured none as faster.
    bool compress = false;
  };

  struct TableState;  // one table's column family and count
  // One table partition of the tier; cheap to copy.
  class TableHandle {
   public:
    TableHandle() = default;
    bool valid() const { return t_ != nullptr; }

   private:
    friend class DiskTier;
    explicit TableHandle(TableState* t) : t_(t) {}
    TableState* t_ = nullptr;
  };

  // One row to write.
  struct Row {
    int64_t id = 0;
    std::span<const float> values;  // the table's width
    int64_t last = 0;
    double count = 0;
  };

  // What the tier did since it opened, for metrics.
  struct Figures {
    int64_t reads = 0;          // rows looked up (Get, GetBatch, Take)
    int64_t writes = 0;         // rows written (Put, PutBatch)
    int64_t bytes_written = 0;  // their keys and values
  };

  // Opens (creating it and its directory if missing) the database in `dir`.
  // Errors name the directory: FailedPrecondition when it cannot be made or
  // opened (not writable, not a directory); Unavailable when another
  // process holds its lock.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const std::string& dir, Options options);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const std::string& dir() const { return dir_; }

  // Every call below taking a TableHandle REQUIRES one from this tier's
  // Table(). Each may also return RocksDB's own errors: ResourceExhausted
  // (disk full), DataLoss (a corrupt file), Unavailable (other I/O errors).

  // The table `name` with rows of `width` floats, made on first call.
  // InvalidArgument: width < 1, or `name` already open with another width.
  // Errors of RocksDB making its column family.
  absl::StatusOr<TableHandle> Table(const std::string& name, int64_t width);

  // Writes row `id` (replacing a row of `id` on disk). InvalidArgument: a
  // row of the wrong width. `fresh`: write without the lookup that keeps
  // Count exact, for a caller that keeps its own count of what is on disk
  // (Count then takes each such row as a new one).
  absl::Status Put(TableHandle t, int64_t id, std::span<const float> row, int64_t last,
                   double count, bool fresh = false);
  // Writes `rows` in one atomic batch; an id may appear once.
  // InvalidArgument: a row of the wrong width, an id twice; nothing written.
  absl::Status PutBatch(TableHandle t, std::span<const Row> rows, bool fresh = false);

  // Reads row `id` into `row_out` (the table's width), its entry into
  // `*last`, `*count`, and deletes it. false: no row of `id` on disk.
  // DataLoss: a value that does not decode (left on disk).
  absl::StatusOr<bool> Take(TableHandle t, int64_t id, std::span<float> row_out, int64_t* last,
                            double* count);
  // Take, without deleting.
  absl::StatusOr<bool> Get(TableHandle t, int64_t id, std::span<float> row_out, int64_t* last,
                           double* count);
  // One row's outcome in GetBatch: whether it was found, its entry, and
  // its own error (DataLoss for a value that does not decode; RocksDB's).
  struct Got {
    absl::Status status;
    bool found = false;
    int64_t last = 0;
    double count = 0;
  };
  // Get of every id of `ids` in one batched lookup (RocksDB's MultiGet: one
  // pass down the memtables and levels for all): row i into
  // rows_out[i * width, (i + 1) * width), its outcome into got[i].
  // InvalidArgument, nothing read: `rows_out` or `got` of the wrong size.
  // FailedPrecondition: the table was lost by a failed Clear.
  absl::Status GetBatch(TableHandle t, std::span<const int64_t> ids, std::span<float> rows_out,
                        std::span<Got> got);

  // Rows of `t` on disk (exact).
  int64_t Count(TableHandle t) const;

  // Calls `fn` on every row of `t` in id order, as of the call (a
  // snapshot); `fn` may call the tier, the scan sees none of its writes.
  // Stops at, and returns, the first error of `fn`; DataLoss at a value
  // that does not decode.
  using RowFn = absl::FunctionRef<absl::Status(int64_t id, std::span<const float> row, int64_t last,
                                               double count)>;
  absl::Status ForEach(TableHandle t, RowFn fn);

  // Deletes every row of `t` (drops and remakes its column family).
  // REQUIRES: no other call on `t` runs. Should remaking fail, every later
  // call on `t` but Clear is FailedPrecondition.
  absl::Status Clear(TableHandle t);

  Figures figures() const;

  // Reads a table's rows in id order, as of the View's making.
  class Cursor {
   public:
    ~Cursor();
    // At a row; false at the end or at an error (status()).
    bool Valid() const;
    void Next();
    int64_t id() const;
    std::span<const float> row() const;  // valid until Next
    int64_t last() const;
    double count() const;
    // DataLoss at a value that does not decode; RocksDB's read errors.
    const absl::Status& status() const;

    class Impl;

   private:
    friend class DiskTier;
    explicit Cursor(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };

  // One table as of one instant.
  class View {
   public:
    ~View();
    View(const View&) = delete;
    View& operator=(const View&) = delete;
    std::unique_ptr<Cursor> Scan() const;
    int64_t width() const { return width_; }

   private:
    friend class DiskTier;
    View(DiskTier* tier, std::shared_ptr<rocksdb::ColumnFamilyHandle> handle, std::string name,
         int64_t width);
    DiskTier* const tier_;
    const std::shared_ptr<rocksdb::ColumnFamilyHandle> handle_;
    const rocksdb::Snapshot* const snapshot_;
    const std::string name_;
    const int64_t width_;
  };
  // `t` as it is now; later writes, and Clear, leave the View as it was.
  absl::StatusOr<std::unique_ptr<View>> Pin(TableHandle t);

  // A table of the tier's own, written in bulk, then read through the View
  // Seal makes; dropped when that View (or, unsealed, the Scratch) goes.
  class Scratch {
   public:
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    // Writes `rows` (each of the width), each replacing the row of its id
    // written before, if any. InvalidArgument: a row of another width;
    // FailedPrecondition after Seal; RocksDB's errors.
    absl::Status Put(std::span<const Row> rows);
    // Deletes the rows of `ids` (those written; others are no error).
    // Errors: as Put's.
    absl::Status Delete(std::span<const int64_t> ids);
    std::unique_ptr<View> Seal();

   private:
    friend class DiskTier;
    Scratch(DiskTier* tier, std::shared_ptr<rocksdb::ColumnFamilyHandle> handle, std::string name,
            int64_t width);
    DiskTier* const tier_;
    std::shared_ptr<rocksdb::ColumnFamilyHandle> handle_;
    const std::string name_;
    const int64_t width_;
  };
  // A new scratch table of rows of `width` floats. Errors: InvalidArgument
  // for a width out of [1, 2^28]; RocksDB's, making its column family.
  absl::StatusOr<std::unique_ptr<Scratch>> NewScratch(int64_t width);

 private:
  DiskTier(std::string dir, Options options);
  // Shares `handle`, destroying it (dropping its family first when `drop`)
  // when the last holder lets go.
  std::shared_ptr<rocksdb::ColumnFamilyHandle> Own(rocksdb::ColumnFamilyHandle* handle, bool drop);

  const std::string dir_;
  const Options options_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* default_family_ = nullptr;  // kept empty
  // The column families' options, the write options.
  struct Settings;
  std::unique_ptr<Settings> settings_;

  absl::Mutex mu_;  // guards making tables
  absl::flat_hash_map<std::string, std::unique_ptr<TableState>> tables_ ABSL_GUARDED_BY(mu_);

  std::atomic<int64_t> reads_{0};
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> scratch_counter_{0};  // names scratch tables
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_DISK_TIER_H_
