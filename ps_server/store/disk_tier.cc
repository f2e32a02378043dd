#include "ps_server/store/disk_tier.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/slice.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace pst::ps {

struct DiskTier::TableState {
  std::string name;
  std::string family;  // the column family's name
  int64_t width = 0;
  // Remade by Clear; a View keeps its own reference, so that a family
  // Clear dropped stays readable through it.
  std::shared_ptr<rocksdb::ColumnFamilyHandle> handle;
  std::atomic<int64_t> count{0};
};

struct DiskTier::Settings {
  rocksdb::ColumnFamilyOptions family;
  rocksdb::ColumnFamilyOptions scratch;
  rocksdb::WriteOptions write;
};

namespace {

constexpr size_t kKeyBytes = 8;
constexpr size_t kHeaderBytes = 8;    // version, width
constexpr size_t kTrailerBytes = 16;  // last, count
constexpr uint64_t kSignBit = uint64_t{1} << 63;

size_t ValueBytes(int64_t width) {
  return kHeaderBytes + static_cast<size_t>(width) * sizeof(float) + kTrailerBytes;
}

std::string FamilyName(const std::string& name) { return "t" + absl::BytesToHexString(name); }

// The table name of a family FamilyName made; false for another family.
bool TableName(const std::string& family, std::string* name) {
  if (family.empty() || family[0] != 't' || family.size() % 2 != 1) return false;
  const std::string hex = family.substr(1);
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  *name = absl::HexStringToBytes(hex);
  return true;
}

// Key: the id's bits with the sign flipped, big-endian (int64 order).
void EncodeKey(int64_t id, char* out) {
  uint64_t v = static_cast<uint64_t>(id) ^ kSignBit;
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

int64_t DecodeKey(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return static_cast<int64_t>(v ^ kSignBit);
}

template <typename T>
void PutLe(T v, char* out) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, &v, sizeof(T));
  } else {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<char>(b[sizeof(T) - 1 - i]);
  }
}

template <typename T>
T GetLe(const char* in) {
  T v;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, in, sizeof(T));
  } else {
    unsigned char b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<unsigned char>(in[sizeof(T) - 1 - i]);
    std::memcpy(&v, b, sizeof(T));
  }
  return v;
}

void EncodeValue(std::span<const float> row, int64_t last, double count, std::string* out) {
  out->resize(ValueBytes(static_cast<int64_t>(row.size())));
  char* p = out->data();
  PutLe<uint32_t>(DiskTier::kFormatVersion, p);
  PutLe<uint32_t>(static_cast<uint32_t>(row.size()), p + 4);
  p += kHeaderBytes;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, row.data(), row.size() * sizeof(float));
    p += row.size() * sizeof(float);
  } else {
    for (float f : row) {
      PutLe<float>(f, p);
      p += sizeof(float);
    }
  }
  PutLe<int64_t>(last, p);
  PutLe<double>(count, p + 8);
}

absl::Status DecodeValue(const rocksdb::Slice& value, const std::string& table, int64_t id,
                         std::span<float> row_out, int64_t* last, double* count) {
  const size_t width = row_out.size();
  if (value.size() != ValueBytes(static_cast<int64_t>(width))) {
    return absl::DataLossError(absl::StrCat("disk tier: table '", absl::CHexEscape(table), "' id ",
                                            id, ": value of ", value.size(), " bytes, want ",
                                            ValueBytes(width), " (width ", width, ")"));
  }
  const char* p = value.data();
  const uint32_t version = GetLe<uint32_t>(p);
  const uint32_t stored_width = GetLe<uint32_t>(p + 4);
  if (version != DiskTier::kFormatVersion || stored_width != width) {
    return absl::DataLossError(absl::StrCat(
        "disk tier: table '", absl::CHexEscape(table), "' id ", id, ": format version ", version,
        " width ", stored_width, ", want version ", DiskTier::kFormatVersion, " width ", width));
  }
  p += kHeaderBytes;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(row_out.data(), p, width * sizeof(float));
    p += width * sizeof(float);
  } else {
    for (float& f : row_out) {
      f = GetLe<float>(p);
      p += sizeof(float);
    }
  }
  *last = GetLe<int64_t>(p);
  *count = GetLe<double>(p + 8);
  return absl::OkStatus();
}

absl::Status Lost(const std::string& table) {
  return absl::FailedPreconditionError(
      absl::StrCat("disk tier: table '", absl::CHexEscape(table), "' was lost by a failed Clear"));
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("disk tier: ", what, ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace

DiskTier::DiskTier(std::string dir, Options options)
    : dir_(std::move(dir)), options_(options), settings_(std::make_unique<Settings>()) {}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, Options options) {
  if (dir.empty()) return absl::InvalidArgumentError("disk tier: no directory given");
  if (options.block_cache_bytes < 0 || options.write_buffer_bytes < (int64_t{1} << 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier: block_cache_bytes ", options.block_cache_bytes,
        " must be >= 0, write_buffer_bytes ", options.write_buffer_bytes, " >= 64 KiB"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("disk tier: cannot make directory ", dir, ": ", ec.message()));
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(dir, options));

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  // Memtables of every table together; the largest flushes past it.
  db_options.db_write_buffer_size = static_cast<size_t>(options.write_buffer_bytes);
  db_options.keep_log_file_num = 2;
  db_options.max_log_file_size = size_t{4} << 20;

  rocksdb::ColumnFamilyOptions& family = tier->settings_->family;
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache =
      options.block_cache_bytes > 0
          ? rocksdb::NewLRUCache(static_cast<size_t>(options.block_cache_bytes))
          : nullptr;
  table_options.no_block_cache = options.block_cache_bytes == 0;
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Index and filter blocks count against the block cache too, so that
  // the tier's memory is the cache's and the write buffers', whatever the
  // rows on disk (the first level's stay in it: every lookup reads them).
  table_options.cache_index_and_filter_blocks = options.block_cache_bytes > 0;
  table_options.pin_l0_filter_and_index_blocks_in_cache = true;
  // Point lookups: a hash index inside each data block spares the binary
  // search.
  table_options.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  family.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  family.write_buffer_size = static_cast<size_t>(options.write_buffer_bytes / 2);
  // A bloom filter over the memtable too: Put looks each id up first.
  family.memtable_whole_key_filtering = true;
  family.memtable_prefix_bloom_size_ratio = 0.05;
  // Memtables hashed by the whole key (the "prefix" is all 8 bytes): a
  // point lookup or write costs a hash and a short list, not a descent
  // through one skip list of every entry. Scans must then ask for total
  // order (ForEach, Open's count), and writes to a memtable are serial.
  family.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kKeyBytes));
  family.memtable_factory.reset(rocksdb::NewHashSkipListRepFactory(1 << 16));
  db_options.allow_concurrent_memtable_write = false;
  // Most lookups of ids never evicted miss: the last level's filters count.
  family.optimize_filters_for_hits = false;
  family.compression = options.compress ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  family.bottommost_compression = family.compression;
  // No WAL: the checkpoint is the durability, and the tier starts empty.
  tier->settings_->write.disableWAL = true;
  // Scratch tables are written once, in bulk, then scanned in order: a
  // vector memtable appends, and is sorted once.
  tier->settings_->scratch = family;
  tier->settings_->scratch.memtable_factory.reset(new rocksdb::VectorRepFactory());
  tier->settings_->scratch.memtable_whole_key_filtering = false;
  tier->settings_->scratch.memtable_prefix_bloom_size_ratio = 0;

  // Every family already there must be opened.
  std::vector<std::string> families;
  rocksdb::Status s = rocksdb::DB::ListColumnFamilies(db_options, dir, &families);
  if (!s.ok()) families.clear();  // a new database
  bool has_default = false;
  for (const std::string& f : families) has_default |= f == rocksdb::kDefaultColumnFamilyName;
  if (!has_default) families.insert(families.begin(), rocksdb::kDefaultColumnFamilyName);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& f : families) descriptors.emplace_back(f, family);

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  s = rocksdb::DB::Open(rocksdb::Options(db_options, family), dir, descriptors, &handles, &db);
  if (!s.ok()) {
    const std::string msg = absl::StrCat("disk tier: cannot open ", dir, ": ", s.ToString());
    if (absl::StrContains(absl::AsciiStrToLower(s.ToString()), "lock"))
      return absl::UnavailableError(msg);
    return absl::FailedPreconditionError(msg);
  }
  tier->db_.reset(db);

  absl::Status status;
  for (size_t i = 0; i < handles.size(); ++i) {
    rocksdb::ColumnFamilyHandle* h = handles[i];
    std::string name;
    if (families[i] == rocksdb::kDefaultColumnFamilyName) {
      tier->default_family_ = h;
      continue;
    }
    if (options.wipe_on_open || !TableName(families[i], &name)) {
      if (status.ok()) {
        status = FromRocks(db->DropColumnFamily(h), absl::StrCat(dir, ": dropping a table"));
      }
      db->DestroyColumnFamilyHandle(h);
      continue;
    }
    // Kept: its width is told by Table(); its rows are counted now.
    auto t = std::make_unique<TableState>();
    t->name = name;
    t->family = families[i];
    t->handle = tier->Own(h, /*drop=*/false);
    rocksdb::ReadOptions read;
    read.fill_cache = false;
    read.total_order_seek = true;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read, h));
    int64_t n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
    if (status.ok()) status = FromRocks(it->status(), absl::StrCat(dir, ": counting rows"));
    t->count.store(n);
    absl::MutexLock lock(&tier->mu_);
    tier->tables_[name] = std::move(t);
  }
  if (!status.ok()) return status;
  return tier;
}

DiskTier::~DiskTier() {
  if (db_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    tables_.clear();  // destroys their handles
  }
  if (default_family_ != nullptr) db_->DestroyColumnFamilyHandle(default_family_);
  db_->Close().PermitUncheckedError();
  db_.reset();
}

absl::StatusOr<DiskTier::TableHandle> DiskTier::Table(const std::string& name, int64_t width) {
  if (width < 1 || width > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: table '", absl::CHexEscape(name),
                                                   "': width ", width, " out of [1, 2^28]"));
  }
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(name);
  if (it != tables_.end()) {
    TableState* t = it->second.get();
    if (t->width == 0) t->width = width;  // kept from before Open
    if (t->width != width) {
      return absl::InvalidArgumentError(absl::StrCat("disk tier: table '", absl::CHexEscape(name),
                                                     "' has width ", t->width, ", not ", width));
    }
    return TableHandle(t);
  }
  auto t = std::make_unique<TableState>();
  t->name = name;
  t->family = FamilyName(name);
  t->width = width;
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  absl::Status s = FromRocks(db_->CreateColumnFamily(settings_->family, t->family, &handle),
                             absl::StrCat(dir_, ": making table '", absl::CHexEscape(name), "'"));
  if (!s.ok()) return s;
  t->handle = Own(handle, /*drop=*/false);
  TableState* raw = t.get();
  tables_[name] = std::move(t);
  return TableHandle(raw);
}

absl::Status DiskTier::Put(TableHandle t, int64_t id, std::span<const float> row, int64_t last,
                           double count, bool fresh) {
  Row r{id, row, last, count};
  return PutBatch(t, std::span<const Row>(&r, 1), fresh);
}

absl::Status DiskTier::PutBatch(TableHandle h, std::span<const Row> rows, bool fresh) {
  TableState* t = h.t_;
  if (t->handle == nullptr) return Lost(t->name);
  if (rows.empty()) return absl::OkStatus();
  if (rows.size() > 1) {
    absl::flat_hash_set<int64_t> ids;
    ids.reserve(rows.size());
    for (const Row& r : rows) {
      if (!ids.insert(r.id).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "disk tier: table '", absl::CHexEscape(t->name), "': id ", r.id, " twice in a batch"));
      }
    }
  }
  for (const Row& r : rows) {
    if (static_cast<int64_t>(r.values.size()) != t->width) {
      return absl::InvalidArgumentError(
          absl::StrCat("disk tier: table '", absl::CHexEscape(t->name), "' id ", r.id, ": row of ",
                       r.values.size(), " floats, width ", t->width));
    }
  }
  rocksdb::WriteBatch batch(rows.size() * (kKeyBytes + ValueBytes(t->width) + 8));
  std::string value;
  std::string found;
  char key[kKeyBytes];
  int64_t added = 0;
  for (const Row& r : rows) {
    EncodeKey(r.id, key);
    const rocksdb::Slice k(key, kKeyBytes);
    // Count stays exact when a row replaces one on disk.
    bool value_found = false;
    bool exists =
        !fresh &&
        db_->KeyMayExist(rocksdb::ReadOptions(), t->handle.get(), k, &found, &value_found);
    if (exists && !value_found) {
      rocksdb::PinnableSlice v;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), t->handle.get(), k, &v);
      if (!s.ok() && !s.IsNotFound()) {
        return FromRocks(s, absl::StrCat("table '", absl::CHexEscape(t->name), "' id ", r.id));
      }
      exists = s.ok();
    }
    if (!exists) ++added;
    EncodeValue(r.values, r.last, r.count, &value);
    rocksdb::Status s = batch.Put(t->handle.get(), k, value);
    if (!s.ok()) return FromRocks(s, absl::StrCat("table '", absl::CHexEscape(t->name), "'"));
  }
  const int64_t bytes = static_cast<int64_t>(batch.GetDataSize());
  rocksdb::Status s = db_->Write(settings_->write, &batch);
  if (!s.ok()) {
    return FromRocks(s, absl::StrCat("writing ", rows.size(), " rows of table '",
                                     absl::CHexEscape(t->name), "'"));
  }
  t->count.fetch_add(added, std::memory_order_relaxed);
  writes_.fetch_add(static_cast<int64_t>(rows.size()), std::memory_order_relaxed);
  bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<bool> DiskTier::Get(TableHandle h, int64_t id, std::span<float> row_out,
                                   int64_t* last, double* count) {
  TableState* t = h.t_;
  if (t->handle == nullptr) return Lost(t->name);
  if (static_cast<int64_t>(row_out.size()) != t->width) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: table '", absl::CHexEscape(t->name),
                                                   "': room for ", row_out.size(),
                                                   " floats, width ", t->width));
  }
  char key[kKeyBytes];
  EncodeKey(id, key);
  rocksdb::PinnableSlice v;
  reads_.fetch_add(1, std::memory_order_relaxed);
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), t->handle.get(), rocksdb::Slice(key, kKeyBytes), &v);
  if (s.IsNotFound()) return false;
  if (!s.ok()) {
    return FromRocks(s, absl::StrCat("table '", absl::CHexEscape(t->name), "' id ", id));
  }
  absl::Status d = DecodeValue(v, t->name, id, row_out, last, count);
  if (!d.ok()) return d;
  return true;
}

absl::StatusOr<bool> DiskTier::Take(TableHandle h, int64_t id, std::span<float> row_out,
                                    int64_t* last, double* count) {
  absl::StatusOr<bool> found = Get(h, id, row_out, last, count);
  if (!found.ok() || !*found) return found;
  TableState* t = h.t_;
  char key[kKeyBytes];
  EncodeKey(id, key);
  rocksdb::Status s =
      db_->Delete(settings_->write, t->handle.get(), rocksdb::Slice(key, kKeyBytes));
  if (!s.ok()) {
    return FromRocks(s, absl::StrCat("deleting table '", absl::CHexEscape(t->name), "' id ", id));
  }
  t->count.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

int64_t DiskTier::Count(TableHandle h) const { return h.t_->count.load(std::memory_order_relaxed); }

absl::Status DiskTier::ForEach(TableHandle h, RowFn fn) {
  PST_ASSIGN_OR_RETURN(std::unique_ptr<View> view, Pin(h));
  std::unique_ptr<Cursor> c = view->Scan();
  for (; c->Valid(); c->Next()) PST_RETURN_IF_ERROR(fn(c->id(), c->row(), c->last(), c->count()));
  return c->status();
}

absl::Status DiskTier::Clear(TableHandle h) {
  TableState* t = h.t_;
  const std::string what = absl::StrCat(dir_, ": clearing table '", absl::CHexEscape(t->name), "'");
  if (t->handle != nullptr) {  // else a failed Clear's retry
    absl::Status s = FromRocks(db_->DropColumnFamily(t->handle.get()), what);
    if (!s.ok()) return s;
    t->handle.reset();  // destroyed once no View reads it
  }
  t->count.store(0, std::memory_order_relaxed);
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  PST_RETURN_IF_ERROR(
      FromRocks(db_->CreateColumnFamily(settings_->family, t->family, &handle), what));
  t->handle = Own(handle, /*drop=*/false);
  return absl::OkStatus();
}

std::shared_ptr<rocksdb::ColumnFamilyHandle> DiskTier::Own(rocksdb::ColumnFamilyHandle* handle,
                                                            bool drop) {
  rocksdb::DB* db = db_.get();
  return std::shared_ptr<rocksdb::ColumnFamilyHandle>(handle, [db, drop](auto* h) {
    if (drop) db->DropColumnFamily(h).PermitUncheckedError();
    db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  });
}

// ---------------------------------------------------------------------------
// Views, cursors and scratch tables.

class DiskTier::Cursor::Impl {
 public:
  Impl(std::unique_ptr<rocksdb::Iterator> it, std::string table, int64_t width)
      : it_(std::move(it)), table_(std::move(table)), row_(static_cast<size_t>(width)) {}
  std::unique_ptr<rocksdb::Iterator> it_;
  std::string table_;
  std::vector<float> row_;
  int64_t id_ = 0;
  int64_t last_ = 0;
  double count_ = 0;
  absl::Status status_;
  bool valid_ = false;

  // Decodes the row the iterator is at, or ends with its status.
  void Load() {
    valid_ = false;
    if (!status_.ok()) return;
    if (!it_->Valid()) {
      status_ = FromRocks(it_->status(), absl::StrCat("reading table '", absl::CHexEscape(table_),
                                                      "'"));
      return;
    }
    const rocksdb::Slice k = it_->key();
    if (k.size() != kKeyBytes) {
      status_ = absl::DataLossError(absl::StrCat("disk tier: table '", absl::CHexEscape(table_),
                                                 "': key of ", k.size(), " bytes"));
      return;
    }
    id_ = DecodeKey(k.data());
    status_ = DecodeValue(it_->value(), table_, id_, std::span<float>(row_), &last_, &count_);
    valid_ = status_.ok();
  }
};

DiskTier::Cursor::Cursor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::Cursor::~Cursor() = default;
bool DiskTier::Cursor::Valid() const { return impl_->valid_; }
void DiskTier::Cursor::Next() {
  if (!impl_->valid_) return;
  impl_->it_->Next();
  impl_->Load();
}
int64_t DiskTier::Cursor::id() const { return impl_->id_; }
std::span<const float> DiskTier::Cursor::row() const { return impl_->row_; }
int64_t DiskTier::Cursor::last() const { return impl_->last_; }
double DiskTier::Cursor::count() const { return impl_->count_; }
const absl::Status& DiskTier::Cursor::status() const { return impl_->status_; }

DiskTier::View::View(DiskTier* tier, std::shared_ptr<rocksdb::ColumnFamilyHandle> handle,
                     std::string name, int64_t width)
    : tier_(tier),
      handle_(std::move(handle)),
      snapshot_(tier->db_->GetSnapshot()),
      name_(std::move(name)),
      width_(width) {}

DiskTier::View::~View() { tier_->db_->ReleaseSnapshot(snapshot_); }

std::unique_ptr<DiskTier::Cursor> DiskTier::View::Scan() const {
  rocksdb::ReadOptions read;
  read.snapshot = snapshot_;
  read.fill_cache = false;  // a scan would push the hot rows' blocks out
  read.total_order_seek = true;
  auto impl = std::make_unique<Cursor::Impl>(
      std::unique_ptr<rocksdb::Iterator>(tier_->db_->NewIterator(read, handle_.get())), name_,
      width_);
  impl->it_->SeekToFirst();
  impl->Load();
  return std::unique_ptr<Cursor>(new Cursor(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<DiskTier::View>> DiskTier::Pin(TableHandle h) {
  TableState* t = h.t_;
  if (t->handle == nullptr) return Lost(t->name);
  return std::unique_ptr<View>(new View(this, t->handle, t->name, t->width));
}

DiskTier::Scratch::Scratch(DiskTier* tier, std::shared_ptr<rocksdb::ColumnFamilyHandle> handle,
                           std::string name, int64_t width)
    : tier_(tier), handle_(std::move(handle)), name_(std::move(name)), width_(width) {}

DiskTier::Scratch::~Scratch() = default;

absl::Status DiskTier::Scratch::Put(std::span<const Row> rows) {
  if (handle_ == nullptr) return absl::FailedPreconditionError("disk tier: scratch table sealed");
  rocksdb::WriteBatch batch(rows.size() * (kKeyBytes + ValueBytes(width_) + 8));
  std::string value;
  char key[kKeyBytes];
  for (const Row& r : rows) {
    if (static_cast<int64_t>(r.values.size()) != width_) {
      return absl::InvalidArgumentError(absl::StrCat("disk tier: ", name_, " id ", r.id,
                                                     ": row of ", r.values.size(),
                                                     " floats, width ", width_));
    }
    EncodeKey(r.id, key);
    EncodeValue(r.values, r.last, r.count, &value);
    rocksdb::Status s = batch.Put(handle_.get(), rocksdb::Slice(key, kKeyBytes), value);
    if (!s.ok()) return FromRocks(s, name_);
  }
  return FromRocks(tier_->db_->Write(tier_->settings_->write, &batch),
                   absl::StrCat("writing ", rows.size(), " rows of ", name_));
}

std::unique_ptr<DiskTier::View> DiskTier::Scratch::Seal() {
  auto view = std::unique_ptr<View>(new View(tier_, std::move(handle_), name_, width_));
  handle_ = nullptr;
  return view;
}

absl::StatusOr<std::unique_ptr<DiskTier::Scratch>> DiskTier::NewScratch(int64_t width) {
  if (width < 1 || width > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk tier: scratch table width ", width, " out of [1, 2^28]"));
  }
  // Not a table's name ("t..."): Open drops it, should a crash leave it.
  const std::string family = absl::StrCat("s", scratch_counter_.fetch_add(1));
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  PST_RETURN_IF_ERROR(
      FromRocks(db_->CreateColumnFamily(settings_->scratch, family, &handle),
                absl::StrCat(dir_, ": making scratch table ", family)));
  return std::unique_ptr<Scratch>(new Scratch(this, Own(handle, /*drop=*/true),
                                              absl::StrCat("scratch table ", family), width));
}

DiskTier::Figures DiskTier::figures() const {
  return Figures{reads_.load(std::memory_order_relaxed), writes_.load(std::memory_order_relaxed),
                 bytes_written_.load(std::memory_order_relaxed)};
}

}  // namespace pst::ps
