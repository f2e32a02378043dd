// DiskTier's private parts, shared by disk_tier.cc (the tables, point reads
// and writes) and disk_tier_views.cc (views, cursors, scratch tables): the
// state of one table, the RocksDB settings, the layout of a row's key and
// value (disk_tier.h says it), and RocksDB's statuses as absl's. Nothing
// outside the DiskTier includes it.
#ifndef PST_PS_SERVER_STORE_DISK_TIER_FORMAT_H_
#define PST_PS_SERVER_STORE_DISK_TIER_FORMAT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ps_server/store/disk_tier.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/status.h"

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

namespace disk_tier_format {

constexpr size_t kKeyBytes = 8;
constexpr size_t kHeaderBytes = 8;    // version, width
constexpr size_t kTrailerBytes = 16;  // last, count

// Bytes of the value of a row of `width` floats.
size_t ValueBytes(int64_t width);

// The column family of table `name` ("t" + hex), and back: false for a
// family of another kind (a scratch table's, "default").
std::string FamilyName(const std::string& name);
bool TableName(const std::string& family, std::string* name);

// The 8 key bytes of `id` (int64 order), and back.
void EncodeKey(int64_t id, char* out);
int64_t DecodeKey(const char* in);

// A row's value; DecodeValue checks its size, version and width against
// `row_out`'s, DataLoss naming `table` and `id` when one is wrong.
void EncodeValue(std::span<const float> row, int64_t last, double count, std::string* out);
absl::Status DecodeValue(const rocksdb::Slice& value, const std::string& table, int64_t id,
                         std::span<float> row_out, int64_t* last, double* count);

// FailedPrecondition: `table` was lost by a failed Clear.
absl::Status Lost(const std::string& table);
// RocksDB's status as absl's, prefixed by `what`: ResourceExhausted (no
// space), DataLoss (corruption), Unavailable (I/O), and so on.
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what);

}  // namespace disk_tier_format
}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_DISK_TIER_FORMAT_H_
