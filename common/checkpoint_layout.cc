#include "common/checkpoint_layout.h"

#include <zlib.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tensor_util.h"

namespace pst::common {

uint32_t ShardCrc32(const char* data, size_t size, uint32_t seed) {
  uLong crc = seed;
  // zlib takes uInt lengths: feed large buffers in chunks.
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    const size_t n = std::min(size, kChunk);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n));
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

bool ShardSpecIsHash(const proto::VariableSpec& spec) { return spec.routing() == proto::HASH; }

absl::StatusOr<uint64_t> ShardFloatPayloadBytes(const proto::VariableSpec& spec, int64_t rows) {
  Shape rest;
  for (int i = 1; i < spec.shape_size(); ++i) rest.Add(spec.shape(i));
  absl::StatusOr<int64_t> dim = NumElements(rest);
  if (!dim.ok()) return dim.status();
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("negative row count ", rows));
  if (*dim != 0 && rows > INT64_MAX / static_cast<int64_t>(sizeof(float)) / *dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(rows, " rows of ", *dim, " elements overflow a 64-bit size"));
  }
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(*dim) * sizeof(float);
}

}  // namespace pst::common
