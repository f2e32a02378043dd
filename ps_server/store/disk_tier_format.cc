#include "ps_server/store/disk_tier_format.h"

#include <bit>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace pst::ps::disk_tier_format {
namespace {

constexpr uint64_t kSignBit = uint64_t{1} << 63;

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

}  // namespace

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

}  // namespace pst::ps::disk_tier_format
