// Writes safetensors files for tests: well-formed ones from named F32
// tensors, and any header and data bytes, to make corrupt ones.
#ifndef PST_MODELS_SAFETENSORS_TEST_UTIL_H_
#define PST_MODELS_SAFETENSORS_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace pst::models::safetensors_testing {

struct F32Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// The 8-byte little-endian header length, the header, then the data.
inline void WriteRaw(const std::string& path, uint64_t header_length, const std::string& header,
                     const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(header_length >> (8 * i) & 0xff));
  out << header << data;
}

// A header of `tensors` laid out one after the other, and their data.
inline std::pair<std::string, std::string> Encode(const std::vector<F32Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const F32Tensor& t : tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  return {header.dump(), data};
}

inline void WriteSafetensors(const std::string& path, const std::vector<F32Tensor>& tensors) {
  auto [header, data] = Encode(tensors);
  WriteRaw(path, header.size(), header, data);
}

// 0, 1, 2, ... scaled, so every element differs.
inline std::vector<float> Iota(int64_t n, float scale = 0.5f, float offset = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = offset + scale * static_cast<float>(i);
  return v;
}

}  // namespace pst::models::safetensors_testing

#endif  // PST_MODELS_SAFETENSORS_TEST_UTIL_H_
