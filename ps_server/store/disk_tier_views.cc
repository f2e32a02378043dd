// DiskTier's reads of a table as of one instant: Views (a RocksDB
// snapshot of a column family), the Cursors that scan them in id order,
// and Scratch tables (disk_tier.h).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/disk_tier_format.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace pst::ps {

using disk_tier_format::DecodeKey;
using disk_tier_format::DecodeValue;
using disk_tier_format::EncodeKey;
using disk_tier_format::EncodeValue;
using disk_tier_format::FromRocks;
using disk_tier_format::kKeyBytes;
using disk_tier_format::Lost;
using disk_tier_format::ValueBytes;

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

absl::Status DiskTier::Scratch::Delete(std::span<const int64_t> ids) {
  if (handle_ == nullptr) return absl::FailedPreconditionError("disk tier: scratch table sealed");
  rocksdb::WriteBatch batch;
  char key[kKeyBytes];
  for (int64_t id : ids) {
    EncodeKey(id, key);
    rocksdb::Status s = batch.Delete(handle_.get(), rocksdb::Slice(key, kKeyBytes));
    if (!s.ok()) return FromRocks(s, name_);
  }
  return FromRocks(tier_->db_->Write(tier_->settings_->write, &batch),
                   absl::StrCat("deleting ", ids.size(), " rows of ", name_));
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
}  // namespace pst::ps
