// The checkpoint file format: shard files and manifests.
//
// A checkpoint lives in <root>/ckpt-<step, 12 digits>/ and holds:
//   shard-<ps>-of-<num_ps>.pst   one per ps, written by that ps
//   MANIFEST.json                written last by the chief: the commit point
// A directory without a readable manifest is not a checkpoint (a crash in
// the middle of a save leaves the previous checkpoint the latest one).
// An incremental checkpoint's manifest names the checkpoint it adds to
// (CheckpointManifest.base); its shards hold what changed since. Listing,
// chains, retention and the checks a restore makes: checkpoint_chain.h.
//
// Shard file, little-endian:
//   "PSTSHRD2"                       8-byte magic
//   uint32 record_count
//   record_count records, each:
//     uint32 header_bytes, header    a serialized proto::VariableSpec
//     int64  version                 updates applied to the variable
//     int64  rows                    rows stored (hash variables: ids stored)
//     uint32 tensor_count            values, then each slot, then (hash) ids
//     tensor_count tensors, each:
//       uint64 payload_bytes, payload, uint32 crc32 of the payload
//     uint32 extras                  a mask of the table extras that follow
//                                    (common/checkpoint_layout.h), as tensors:
//       1: int64 [rows] each row's last update, float64 [rows] its lfu count
//       2: the admission counts (AdmissionFilter::Serialize's bytes)
//       4: int64 [n] ids removed since the link before (incremental)
//     uint32 crc32 of the record's bytes before this field
//   "PSTEND01"                       8-byte trailer
// Values and slots are float32 [rows, dim]; hash ids are int64 [rows].
// "PSTSHRD1" files (before the extras) read as records without extras.
// Every file is written to a new temp file of a unique name, fsync'ed and
// renamed into place (common/safe_file.h: no symbolic link is followed).
// A ps names its shard files itself, in its own --checkpoint_dir; requests
// name a checkpoint (CheckCheckpointName), never a path.
//
// Thread-safety: pure functions of their arguments and the files.
#ifndef PST_COMMON_CHECKPOINT_FORMAT_H_
#define PST_COMMON_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

inline constexpr char kManifestFile[] = "MANIFEST.json";
inline constexpr int kManifestFormatVersion = 1;

// Rows of a hash record given on demand rather than held in its vectors (a
// table's rows on disk, read from a snapshot of them): WriteShardFile
// streams them into the file, so that a save never holds them all. Each
// call sees the same rows, in any order; each row comes with its eviction
// entry.
class ShardRowStream {
 public:
  virtual ~ShardRowStream() = default;
  // The rows ForEach gives (it may scan them).
  virtual absl::StatusOr<int64_t> Count() const = 0;
  // `row`: the values, then each slot's (dim floats each), as a table
  // stores them; `row` is valid during the call only.
  using RowFn = absl::FunctionRef<absl::Status(int64_t id, std::span<const float> row,
                                               int64_t last, double count)>;
  // Stops at, and returns, `fn`'s first error, or the stream's own.
  virtual absl::Status ForEach(RowFn fn) const = 0;
};

// A dense record's values and slots, read when the record is written
// rather than copied when it was made (a ps's copy-on-write snapshot,
// ps_server/store/dense_snapshot.h).
class ShardDenseSource {
 public:
  virtual ~ShardDenseSource() = default;
  using TensorsFn = absl::FunctionRef<absl::Status(
      std::span<const float> values, const std::vector<std::span<const float>>& slots)>;
  // Calls `fn` once with the values and each slot as of the record's
  // instant, unchanged for the call's length, and returns its status. A
  // source may be read once: a second Read is FailedPrecondition.
  virtual absl::Status Read(TensorsFn fn) const = 0;
};

// One variable (or partition) as saved by a ps.
struct ShardRecord {
  proto::VariableSpec spec;
  int64_t version = 0;
  int64_t rows = 0;                       // rows in values (and each slot)
  std::vector<float> values;              // [rows, dim]
  std::vector<std::vector<float>> slots;  // each [rows, dim]
  std::vector<int64_t> hash_ids;          // hash variables: the id of each row
  // Bounded hash tables: each row's eviction entry (both empty, or both
  // [rows]), and the admission counts (empty: none).
  std::vector<int64_t> row_last;
  std::vector<double> row_count;
  std::string admission;
  // A hash record of an incremental checkpoint: the ids whose rows were
  // removed (evicted, expired) since the link before it, none of them an
  // id of its rows. Empty in a full checkpoint.
  std::vector<int64_t> removed_ids;
  // A hash record's rows as a stream instead (the vectors above then empty
  // and `rows` 0; WriteShardFile writes the stream's rows, with their
  // entries, and the reader reads them back into the vectors). Only
  // WriteShardFile reads it.
  std::shared_ptr<const ShardRowStream> stream;
  // The slots a streamed row carries (its width is dim * (1 + this)), and
  // whether its rows' entries are written (false: an unbounded table's,
  // which has none).
  int stream_slots = 0;
  bool stream_entries = true;
  // A dense record's values and slots read from a source instead (`rows`
  // set, `values` and `slots` empty; `dense_slots` slots). Only
  // WriteShardFile and MaterializeDense read it.
  std::shared_ptr<const ShardDenseSource> dense;
  int dense_slots = 0;
};

// Reads the dense source of each record that has one into its values and
// slots (and drops the source): the records as a snapshot that copies
// would have made them. Errors: the sources'.
absl::Status MaterializeDense(std::vector<ShardRecord>* records);

// "ckpt-000000001200" for step 1200.
std::string CheckpointDirName(int64_t step);

// The step of a checkpoint directory's name "ckpt-<digits>"; -1 for any
// other name.
int64_t CheckpointStep(const std::string& name);
// "shard-1-of-3.pst".
std::string ShardFileName(int ps_index, int num_ps);

// Writes `records` to `path` atomically (tmp, fsync, rename, fsync of the
// directory; common/shard_writer.cc), those with a dense source first,
// then the others, each in the order given. The file is streamed: it is never
// held whole in memory, and a record's stream is read once to count and
// once to write. Fills `shard` (file name, bytes, crc32 of the whole file).
// Errors: InvalidArgument for a record whose sizes do not fit its spec;
// Internal naming the path and the OS error (ResourceExhausted for a full
// disk); a stream's errors, and Internal when it gives another number of
// rows than it counted. On error no file is left.
absl::Status WriteShardFile(const std::string& path, const std::vector<ShardRecord>& records,
                            proto::CheckpointShard* shard);

// Reads and checks a whole shard file (common/shard_reader.h reads one
// record at a time). Errors: NotFound for a missing file; FailedPrecondition
// for a symbolic link; DataLoss naming the file (and the record/variable
// when known) for a bad magic, a truncated file, a size that does not match
// the spec, or a checksum mismatch.
absl::StatusOr<std::vector<ShardRecord>> ReadShardFile(const std::string& path);

// OK for a checkpoint's name as requests carry it, "ckpt-<digits>";
// InvalidArgument naming it for anything else (a path, "..", empty).
absl::Status CheckCheckpointName(absl::string_view name);

// OK when the manifest lists shard-0-of-N.pst .. shard-(N-1)-of-N.pst, each
// once, with ps_index matching and a size >= 0; InvalidArgument naming the
// first that does not (a path, a repeat, a gap).
absl::Status CheckManifestShards(const proto::CheckpointManifest& manifest);

// Writes <dir>/MANIFEST.json atomically (the commit point; safe_file.h):
// on any error the manifest there before, if any, is unchanged and no temp
// file is left. Errors: ResourceExhausted for a full disk, Internal or
// FailedPrecondition (a link) otherwise, each naming the file.
absl::Status WriteManifest(const std::string& dir, const proto::CheckpointManifest& manifest);
// Fields this build does not know are ignored. Errors: NotFound when
// absent; FailedPrecondition for a symbolic link; DataLoss when it does not
// parse or is of another format_version.
absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir);

}  // namespace pst::common

#endif  // PST_COMMON_CHECKPOINT_FORMAT_H_
