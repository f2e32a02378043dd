#include "models/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pst::models {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies it as it is");

using nlohmann::json;

// Bytes per element of the dtypes safetensors defines; 0 for one it does not.
int64_t ElementBytes(const std::string& dtype) {
  static const std::pair<const char*, int64_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1}};
  for (const auto& [name, bytes] : kSizes) {
    if (dtype == name) return bytes;
  }
  return 0;
}

// A JSON number as a non-negative int64, or -1.
int64_t NonNegative(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    return v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? static_cast<int64_t>(v)
                                                                           : -1;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    return v >= 0 ? v : -1;
  }
  return -1;
}

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path, ": ", what));
}

// Checks one header entry, and turns its offsets into file offsets.
absl::StatusOr<SafetensorsFile::Tensor> ParseEntry(const std::string& path, const std::string& name,
                                                   const json& entry, int64_t data_start,
                                                   int64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!entry.is_object()) return Corrupt(path, absl::StrCat(where, " is not a JSON object"));
  SafetensorsFile::Tensor tensor;
  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    return Corrupt(path, absl::StrCat(where, " has no \"dtype\" string"));
  }
  tensor.dtype = dtype->get<std::string>();
  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    return Corrupt(path, absl::StrCat(where, " has no \"shape\" array"));
  }
  int64_t elements = 1;
  for (const json& d : *shape) {
    const int64_t dim = NonNegative(d);
    if (dim < 0) return Corrupt(path, absl::StrCat(where, " has a shape entry that is not >= 0"));
    if (dim > 0 && elements > std::numeric_limits<int64_t>::max() / 8 / dim) {
      return Corrupt(path, absl::StrCat(where, " has a shape too large"));
    }
    elements *= dim;
    tensor.shape.push_back(dim);
  }
  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    return Corrupt(path, absl::StrCat(where, " has no \"data_offsets\" [begin, end]"));
  }
  const int64_t begin = NonNegative((*offsets)[0]);
  const int64_t end = NonNegative((*offsets)[1]);
  if (begin < 0 || end < 0 || begin > end || end > data_size) {
    return Corrupt(path, absl::StrCat(where, " has data_offsets out of range (the data holds ",
                                      data_size, " bytes)"));
  }
  const int64_t element_bytes = ElementBytes(tensor.dtype);
  if (element_bytes > 0 && end - begin != elements * element_bytes) {
    return Corrupt(path, absl::StrCat(where, " holds ", end - begin, " bytes but its shape and ",
                                      tensor.dtype, " need ", elements * element_bytes));
  }
  tensor.begin = data_start + begin;
  tensor.end = data_start + end;
  return tensor;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open safetensors file ", path));
  in.seekg(0, std::ios::end);
  const int64_t file_size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  unsigned char length_bytes[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8)) {
    return Corrupt(path, "shorter than the 8 bytes of its header length");
  }
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | length_bytes[i];
  if (header_length > static_cast<uint64_t>(file_size - 8)) {
    return Corrupt(path, absl::StrCat("its header length ", header_length,
                                      " runs past the end of the file (", file_size, " bytes)"));
  }
  std::string text(header_length, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(header_length))) {
    return Corrupt(path, "its header could not be read");
  }
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Corrupt(path, "its header is not a JSON object");
  }
  SafetensorsFile file;
  file.path_ = path;
  const int64_t data_start = 8 + static_cast<int64_t>(header_length);
  const int64_t data_size = file_size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    absl::StatusOr<Tensor> tensor = ParseEntry(path, name, entry, data_start, data_size);
    if (!tensor.ok()) return tensor.status();
    file.tensors_.emplace(name, *std::move(tensor));
  }
  // No two tensors may share bytes.
  std::vector<std::pair<const Tensor*, const std::string*>> by_offset;
  for (const auto& [name, tensor] : file.tensors_) by_offset.emplace_back(&tensor, &name);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->begin, a.first->end) < std::tie(b.first->begin, b.first->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i].first->begin < by_offset[i - 1].first->end) {
      return Corrupt(path, absl::StrCat("tensors '", *by_offset[i - 1].second, "' and '",
                                        *by_offset[i].second, "' overlap"));
    }
  }
  return file;
}

const SafetensorsFile::Tensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadF32(const std::string& name) const {
  const Tensor* tensor = Find(name);
  const int64_t rows = tensor == nullptr || tensor->shape.empty() ? 1 : tensor->shape[0];
  return ReadF32Rows(name, 0, rows);
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadF32Rows(const std::string& name,
                                                                int64_t first_row,
                                                                int64_t num_rows) const {
  const Tensor* tensor = Find(name);
  if (tensor == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("safetensors file ", path_, " has no tensor '", name, "'"));
  }
  if (tensor->dtype != "F32") {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path_, ": tensor '", name,
                                                   "' is ", tensor->dtype, ", not F32"));
  }
  // Open checked that the bytes are exactly shape * 4.
  const int64_t rows = tensor->shape.empty() ? 1 : tensor->shape[0];
  const int64_t row_bytes = rows > 0 ? (tensor->end - tensor->begin) / rows : 0;
  if (first_row < 0 || num_rows < 0 || first_row > rows - num_rows) {
    return absl::OutOfRangeError(absl::StrCat("safetensors file ", path_, ": rows [", first_row,
                                              ", ", first_row + num_rows, ") of tensor '", name,
                                              "', which has ", rows));
  }
  std::vector<float> values(num_rows * row_bytes / sizeof(float));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(tensor->begin + first_row * row_bytes);
  if (!in || !in.read(reinterpret_cast<char*>(values.data()),
                      static_cast<std::streamsize>(values.size() * sizeof(float)))) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path_,
                                                   ": the data of tensor '", name,
                                                   "' could not be read (truncated?)"));
  }
  return values;
}

}  // namespace pst::models
