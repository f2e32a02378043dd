// The byte-level pieces of the shard file format that its writer
// (checkpoint_format.cc) and its reader (shard_reader.cc) share. The format
// itself is described in common/checkpoint_format.h.
//
// Thread-safety: constants and pure functions.
#ifndef PST_COMMON_CHECKPOINT_LAYOUT_H_
#define PST_COMMON_CHECKPOINT_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// Version 2 adds each record's table extras; version 1 files still read.
inline constexpr char kShardMagic[] = "PSTSHRD2";
inline constexpr char kShardMagicV1[] = "PSTSHRD1";
// The table extras a version 2 record holds (a bit mask, written after its
// tensors): each row's eviction entry (ShardRecord::row_last, row_count),
// the admission counts (ShardRecord::admission), and the ids an
// incremental checkpoint's record removes (ShardRecord::removed_ids).
inline constexpr uint32_t kShardRowEntries = 1;
inline constexpr uint32_t kShardAdmission = 2;
inline constexpr uint32_t kShardRemoved = 4;
inline constexpr char kShardTrailer[] = "PSTEND01";
inline constexpr size_t kShardTagBytes = 8;
// The smallest tensor: payload_bytes and crc.
inline constexpr size_t kShardMinTensorBytes = 8 + 4;

// zlib's crc32 of `size` bytes (any size), continuing `crc`, the crc32 of
// the bytes before them (0: none).
uint32_t ShardCrc32(const char* data, size_t size, uint32_t crc = 0);

// Whether `spec` is a hash variable's (its record also stores row ids).
bool ShardSpecIsHash(const proto::VariableSpec& spec);

// Bytes of values (and of each slot) for `rows` rows of `spec`; an error
// (the caller picks its code) for a bad shape or an overflow.
absl::StatusOr<uint64_t> ShardFloatPayloadBytes(const proto::VariableSpec& spec, int64_t rows);

}  // namespace pst::common

#endif  // PST_COMMON_CHECKPOINT_LAYOUT_H_
