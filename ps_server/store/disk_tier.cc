#include "ps_server/store/disk_tier.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "ps_server/store/disk_tier_format.h"
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

using disk_tier_format::DecodeValue;
using disk_tier_format::EncodeKey;
using disk_tier_format::EncodeValue;
using disk_tier_format::FamilyName;
using disk_tier_format::FromRocks;
using disk_tier_format::kKeyBytes;
using disk_tier_format::Lost;
using disk_tier_format::TableName;
using disk_tier_format::ValueBytes;

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
  // Memtables hashed by the whole key (the "prefix" is all 8 bytes), each
  // bucket a linked list of its keys' versions, newest first: a point
  // lookup or write costs a hash and a step or two, not a descent through
  // one skip list of every entry. Scans must then ask for total order
  // (ForEach, Open's count), and writes to a memtable are serial. The
  // buckets (8 bytes each, counted in the memtable) take at most 1/64 of it.
  family.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kKeyBytes));
  const size_t buckets =
      std::clamp<size_t>(family.write_buffer_size / 512, 64, size_t{1} << 16);
  family.memtable_factory.reset(rocksdb::NewHashLinkListRepFactory(
      buckets, /*huge_page_tlb_size=*/0, /*bucket_entries_logging_threshold=*/4096,
      /*if_log_bucket_dist_when_flash=*/false));
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

absl::Status DiskTier::GetBatch(TableHandle h, std::span<const int64_t> ids,
                                std::span<float> rows_out, std::span<Got> got) {
  TableState* t = h.t_;
  if (t->handle == nullptr) return Lost(t->name);
  const size_t width = static_cast<size_t>(t->width);
  if (rows_out.size() != ids.size() * width || got.size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier: table '", absl::CHexEscape(t->name), "': ", ids.size(), " ids, room for ",
        rows_out.size(), " floats and ", got.size(), " outcomes, width ", t->width));
  }
  if (ids.empty()) return absl::OkStatus();
  std::vector<char> keys(ids.size() * kKeyBytes);
  std::vector<rocksdb::Slice> slices(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EncodeKey(ids[i], keys.data() + i * kKeyBytes);
    slices[i] = rocksdb::Slice(keys.data() + i * kKeyBytes, kKeyBytes);
  }
  std::vector<rocksdb::PinnableSlice> values(ids.size());
  std::vector<rocksdb::Status> statuses(ids.size());
  reads_.fetch_add(static_cast<int64_t>(ids.size()), std::memory_order_relaxed);
  db_->MultiGet(rocksdb::ReadOptions(), t->handle.get(), ids.size(), slices.data(), values.data(),
                statuses.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    Got& g = got[i];
    g = Got{};
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) {
      g.status = FromRocks(statuses[i],
                           absl::StrCat("table '", absl::CHexEscape(t->name), "' id ", ids[i]));
      continue;
    }
    g.status = DecodeValue(values[i], t->name, ids[i], rows_out.subspan(i * width, width),
                           &g.last, &g.count);
    g.found = g.status.ok();
  }
  return absl::OkStatus();
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


DiskTier::Figures DiskTier::figures() const {
  return Figures{reads_.load(std::memory_order_relaxed), writes_.load(std::memory_order_relaxed),
                 bytes_written_.load(std::memory_order_relaxed)};
}

}  // namespace pst::ps
