// Model specs: a model that pstrain plans, creates, checkpoints, restores
// and exports, but does not compute (its workers do: --worker_command, e.g.
// Python ones). `--model=spec:FILE` names a JSON file:
//
//   {
//     "format": "pstrain.model_spec/1",
//     "initial_values": "cnn.safetensors",   // optional; relative to FILE's folder
//     "variables": [
//       {"name": "conv1.weight", "shape": [16, 1, 3, 3], "kind": "dense", "init": "file"},
//       {"name": "fc.bias", "shape": [10], "kind": "dense", "init": {"kind": "zeros"}},
//       {"name": "emb", "shape": [1000, 8], "kind": "table",
//        "init": {"kind": "normal", "scale": 0.01, "seed": 7}},
//       {"name": "hashemb", "kind": "hash", "dim": 8, "admit_after": 2,
//        "init": {"kind": "uniform", "scale": 0.05, "seed": 3}}
//     ],
//     "optimizer": {"name": "adadelta", "form": "torch", "learning_rate": 1.0,
//                   "schedule": "step:1,gamma:0.7,every:469"},   // optional
//     "clip_norm": 1.0                                           // optional
//   }
//
// - kind: "dense" (exchanged whole; cut into pieces by --dense_piece_bytes),
//   "table" (rank 2, read by rows, partitioned by --partitioner) or "hash"
//   (a hash embedding of width "dim": shape [0, dim], rows made on first
//   touch, each once touched "admit_after" times). "dense" and "table" need
//   a "shape" of positive dims; "hash" takes "dim" instead.
// - init: "file" (the F32 tensor of the same name and shape in the
//   initial_values safetensors file; not for "hash"), or an object
//   {"kind": zeros|constant|uniform|normal|glorot_uniform, "value", "scale",
//   "seed"} (proto Initializer).
// - optimizer: the job's optimizer (proto OptimizerConfig in protobuf's JSON
//   form; "schedule" an LrSchedule object or --lr_schedule's text), used
//   unless --optimizer names another (flags/optimizer_flags.h);
//   pstrain.torch.export_spec writes it from a torch.optim optimizer.
//   clip_norm: TrainingConfig.clip_norm.
// Every key is checked: an unknown one is an error, so a typo never passes
// silently. The parsed list travels in TrainingConfig.spec_variables; only
// the chief reads the values, and sends them in its CreateVariables calls.
#ifndef PST_MODELS_SPEC_MODEL_H_
#define PST_MODELS_SPEC_MODEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/safetensors.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

inline constexpr char kModelSpecFormat[] = "pstrain.model_spec/1";

// Parses the spec `json_text` of the file `path` into
// training->spec_variables and training->spec_initial_values (the
// safetensors path resolved against `path`'s folder), and checks each
// "file" variable against that file's header (present, F32, same shape).
// Errors: InvalidArgument naming `path` and the variable or field (an
// unknown format, a duplicate name, a missing or bad shape, an unknown kind
// or init, a tensor missing or of another shape or dtype, a corrupt
// safetensors file); NotFound for a safetensors file that cannot be opened.
absl::Status ParseModelSpec(const std::string& path, const std::string& json_text,
                            proto::TrainingConfig* training);
// ParseModelSpec of the file `path`. Errors: as ParseModelSpec, and
// NotFound for a spec file that cannot be read.
absl::Status ReadModelSpec(const std::string& path, proto::TrainingConfig* training);

// The initial values of a spec model's plan entries, read from its
// safetensors file. Thread-safe: each call reads the file on its own.
class SpecInitialValues {
 public:
  // Null when no variable of `training` comes from a file.
  // Errors: as SafetensorsFile::Open.
  static absl::StatusOr<std::unique_ptr<const SpecInitialValues>> Open(
      const proto::TrainingConfig& training);

  // The initial values of plan entry `entry` (a whole variable, a piece of
  // a dense one or a partition of a table: exactly the rows it holds, by
  // row_offset and row_stride) as little-endian float32 bytes; "" when its
  // variable takes an initializer. Errors: as SafetensorsFile::ReadF32;
  // InvalidArgument when the file's tensor does not have the entry's shape.
  absl::StatusOr<std::string> ValuesFor(const proto::VariableSpec& entry) const;

 private:
  SpecInitialValues(SafetensorsFile file, const proto::TrainingConfig& training);

  SafetensorsFile file_;
  // Variables initialized from the file: name -> full shape.
  absl::flat_hash_map<std::string, google::protobuf::RepeatedField<int64_t>> from_file_;
};

}  // namespace pst::models

#endif  // PST_MODELS_SPEC_MODEL_H_
