// Checkpoints as a whole: the ckpt-* directories under a root, chains of
// incremental checkpoints, retention, and the checks a restore makes.
//
// A chain is a full checkpoint and the incremental checkpoints saved on it,
// each naming the one before it in its manifest (CheckpointManifest.base,
// a directory beside it of a lower step). Every link is a consistent cut.
// The state at a link is its chain read in order, the full checkpoint
// first: a later link's dense variables and rows replace an earlier one's,
// and the ids it removed go. A link whose chain is broken (a link before
// it missing, unreadable or corrupt) fails its checks, so that a restore,
// which takes the newest checkpoint that passes them, lands on the last
// good link before the break.
//
// Thread-safety: pure functions of their arguments and the files.
#ifndef PST_COMMON_CHECKPOINT_CHAIN_H_
#define PST_COMMON_CHECKPOINT_CHAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// Checkpoint directories under `root` that have a manifest, newest (highest
// step) first. A missing root gives an empty list.
std::vector<std::string> ListCheckpoints(const std::string& root);

// The links of the chain that ends at the checkpoint `dir`: the paths of
// the directories from its full checkpoint to `dir` itself, in that order
// (`dir` alone for a full checkpoint). Reads only the manifests. Errors: as
// ReadManifest for `dir`; DataLoss naming the link for a base that is not
// a checkpoint name, is missing or unreadable, is not of a lower step, or
// was written by another number of ps.
absl::StatusOr<std::vector<std::string>> CheckpointChain(const std::string& dir);

// The RestoreRequest of the checkpoint `dir` (its generation left 0): its
// name and manifest and, for an incremental one, each link before it with
// its manifest (RestoreRequest.chain). Errors: as CheckpointChain.
absl::StatusOr<proto::RestoreRequest> RestoreRequestFor(const std::string& dir);

// Folds the records of one shard of an incremental checkpoint (`later`)
// into those of the same shard of the link before it (`records`), so that
// `records` are what a full checkpoint of the later instant would hold: a
// later dense record replaces the earlier one of its name; a later hash
// record's rows replace or add to the earlier one's (entries included),
// its removed ids go, and its version and admission counts stand. Errors:
// DataLoss naming `where` for a later record of a name the earlier shard
// lacks, or of another kind or row width.
absl::Status FoldLink(std::vector<ShardRecord>* records, std::vector<ShardRecord> later,
                      const std::string& where);
// FoldLink of one hash record: `later`'s rows replace `*into`'s of their
// ids or are added after the others, its removed ids go, and its spec,
// version and admission counts stand. Errors: DataLoss naming `where` for
// rows of another width or slots, or row entries on some rows only.
absl::Status FoldHashRecord(ShardRecord* into, ShardRecord&& later, const std::string& where);

// Writes the checkpoint `dir`, incremental, as one full checkpoint into the
// directory `out` (which must exist): each shard its chain folded
// (FoldLink), one at a time, and a manifest with no base, written last.
// Errors: as CheckpointChain, ReadShardFile, FoldLink, WriteShardFile and
// WriteManifest.
absl::Status WriteFoldedCheckpoint(const std::string& dir, const std::string& out);

// Retention after a save. `verified` is the checkpoint just written and
// checked (InspectCheckpoint). The unit kept is a chain: the chain of
// `verified` and the newest `keep`-1 others (by their full checkpoint's
// step) stay whole, and every link of any other chain goes, as does a link
// whose chain was cut by a link with no manifest at all (it can never be
// restored) when it is older than `verified`. Nothing is removed unless
// `verified` is listed. Directories with no manifest at all older than the
// newest checkpoint are removed (debris of interrupted saves); a directory
// whose manifest exists but cannot be read is never removed, nor the links
// on it. The root is fsync'ed after a removal.
// Errors: InvalidArgument for keep < 1; Internal naming what could not be
// removed.
absl::Status PruneCheckpoints(const std::string& root, int keep, const std::string& verified);

// What `pstrain checkpoint inspect` prints about one checkpoint.
struct CheckpointReport {
  int64_t global_step = 0;
  bool inexact = false;  // CheckpointManifest.inexact
  int num_ps = 0;
  int64_t total_bytes = 0;  // this link's shards
  // The chain's directory names, its full checkpoint first and this one
  // last (one for a full checkpoint), and the bytes of all their shards.
  std::vector<std::string> chain;
  int64_t chain_bytes = 0;
  struct Variable {
    std::string name;  // partition or variable
    std::string shape;
    int64_t rows = 0;     // held in this link (an incremental one: changed)
    int64_t removed = 0;  // ids this link removes (incremental)
    int64_t version = 0;
    int slots = 0;
    int ps_index = 0;
  };
  // The records of this link's shards: an incremental link's hold only
  // what changed since the link before.
  std::vector<Variable> variables;
};

// Reads the manifest and every shard of every link of the checkpoint's
// chain, checking the file sizes and checksums against the manifests and
// every tensor's checksum. Errors: as CheckpointChain, ReadManifest and
// ReadShardFile, and DataLoss for a shard whose size or crc32 differs from
// its manifest, for a variable of the manifest's plan that no link holds,
// or (naming it) for a link before `dir` that fails these checks.
absl::StatusOr<CheckpointReport> InspectCheckpoint(const std::string& dir);

}  // namespace pst::common

#endif  // PST_COMMON_CHECKPOINT_CHAIN_H_
