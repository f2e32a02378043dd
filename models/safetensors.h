// A reader of safetensors files, the tensor format of Hugging Face (and the
// one `pstrain checkpoint export` writes). The format:
//   bytes [0, 8)        N, the header's length, a little-endian uint64
//   bytes [8, 8 + N)    the header: a JSON object mapping each tensor's name
//                       to {"dtype": "F32", "shape": [d0, d1, ...],
//                       "data_offsets": [begin, end]}, plus an optional
//                       "__metadata__" object of strings (ignored here)
//   bytes [8 + N, ...)  the data: tensor t's bytes are [begin, end) of it,
//                       row-major, little-endian
// Open reads and checks the header only; a tensor's bytes are read when
// asked for. Everything is bounded by the file's size: a header longer than
// the file, offsets outside the data, tensors overlapping each other, or a
// byte count that does not match shape * element size are refused before
// anything is allocated for them.
// Thread-compatible: const methods may run on several threads at once.
#ifndef PST_MODELS_SAFETENSORS_H_
#define PST_MODELS_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace pst::models {

class SafetensorsFile {
 public:
  struct Tensor {
    std::string dtype;           // "F32", "F16", "I64", ...
    std::vector<int64_t> shape;  // [] for a scalar
    int64_t begin = 0;           // the bytes' offsets in the file
    int64_t end = 0;
  };

  // Reads and checks the header of `path`.
  // Errors: NotFound for a file that cannot be opened; InvalidArgument,
  // naming the file (and the tensor), for a truncated or corrupt header,
  // offsets out of range or overlapping, or a size that does not match the
  // shape and dtype.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // The tensor named `name`, or null.
  const Tensor* Find(const std::string& name) const;
  // Every tensor's name, sorted.
  std::vector<std::string> Names() const;

  // The values of F32 tensor `name`, read from the file now.
  // Errors: NotFound for no such tensor; InvalidArgument for another dtype,
  // or for a file that no longer holds the bytes (truncated since Open).
  absl::StatusOr<std::vector<float>> ReadF32(const std::string& name) const;
  // Rows [first_row, first_row + num_rows) of F32 tensor `name` (a row is
  // one index of its first dim; a scalar is one row), read from the file
  // now: only those bytes. Errors: ReadF32's, and OutOfRange for rows
  // outside the tensor.
  absl::StatusOr<std::vector<float>> ReadF32Rows(const std::string& name, int64_t first_row,
                                                 int64_t num_rows) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  absl::flat_hash_map<std::string, Tensor> tensors_;
};

}  // namespace pst::models

#endif  // PST_MODELS_SAFETENSORS_H_
