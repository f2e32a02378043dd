// Exporting a checkpoint as one safetensors file, for use outside pstrain
// (`pstrain checkpoint export`).
//
// The partitions of every logical variable are merged back into one whole
// tensor of its full shape, so a reader needs to know nothing of ps,
// partitions or routing. The safetensors file (https://huggingface.co/docs/
// safetensors), little-endian:
//   uint64 N                   length of the JSON header
//   N bytes of JSON            {"<tensor>": {"dtype": "F32", "shape": [...],
//                               "data_offsets": [begin, end]}, ...,
//                               "__metadata__": {"format": "pstrain",
//                               "global_step": "<step>", "checkpoint": "<dir>"}}
//                              padded with spaces to a multiple of 8 bytes
//   the tensors' bytes         row-major; offsets relative to this section
// Data is laid out as the reference implementation does: by element size,
// largest first (the I64 tensors, then the F32 ones), then by name, so every
// tensor starts aligned to its element size. The header's keys are sorted
// by name. The section has no gaps.
//
// Tensors:
//   <variable>            F32, its full shape: a whole variable, or the
//                         partitions of a MOD or DIV variable put back in
//                         global row order.
//   <table>.ids           I64 [n]: a hash embedding's ids (routing HASH; its
//                         rows exist only once touched), ascending, over all
//                         of its partitions.
//   <table>.values        F32 [n, dim...]: row i is the row of ids[i].
// With include_slots, each optimizer slot of a variable too, laid out as the
// variable's values (for a hash table: as <table>.values):
//   <variable>/<slot>     slot names from the job's optimizer: momentum
//                         "accum"; adam "m", "v"; adagrad "accum"; ftrl
//                         "accum", "linear" (the order ps_server/store/optimizer.cc
//                         keeps them in); the slot's index ("0", "1") for
//                         any other.
//
// Thread-safety: a pure function of its arguments and the files.
#ifndef PST_COMMON_CHECKPOINT_EXPORT_H_
#define PST_COMMON_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pst::common {

struct ExportOptions {
  bool include_slots = false;  // also export the optimizer slots
};

struct ExportResult {
  std::string checkpoint;  // the checkpoint directory exported
  int64_t global_step = 0;
  int tensors = 0;    // tensors in the file
  int64_t bytes = 0;  // size of the file written
  // Newer checkpoints of a root passed over because they failed their
  // checks, each "<dir>: <error>".
  std::vector<std::string> skipped;
};

// Exports the checkpoint `dir` to the safetensors file `out`. `dir` is one
// checkpoint (it holds MANIFEST.json) or a root of ckpt-* directories: then
// the newest checkpoint that passes its checks is exported. Every shard is
// checked against the manifest and every tensor against its checksum before
// anything is written; `out` is written to "<out>.tmp", fsync'ed and renamed
// into place, so it is either the whole export or untouched.
// Errors: NotFound for a missing checkpoint or a root without any;
// DataLoss naming the file for a corrupt shard or manifest, and naming the
// variable for partitions that do not make up a whole variable (a partition
// missing or twice, rows not covered, shapes that disagree, a hash id twice);
// InvalidArgument for two tensors that would get the same name; Internal
// naming the path and the OS error when `out` cannot be written.
absl::StatusOr<ExportResult> ExportSafetensors(const std::string& dir, const std::string& out,
                                               const ExportOptions& options);

}  // namespace pst::common

#endif  // PST_COMMON_CHECKPOINT_EXPORT_H_
