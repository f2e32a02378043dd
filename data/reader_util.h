// Small helpers the data readers and generators share: a stable 64-bit mix,
// an owned FILE*, and the pieces of their error messages.
#ifndef PST_DATA_READER_UTIL_H_
#define PST_DATA_READER_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pst::worker::data_internal {

// The splitmix64 finalizer: a bijection on 64 bits with good avalanche.
// Generated data and hashed ids depend on it: never change it.
inline uint64_t Mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z;
}

// Closes a FILE* when it goes out of scope.
struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

inline std::string ErrnoText(int errnum) {
  return std::error_code(errnum, std::generic_category()).message();
}

// Values shown in error messages are cut to this many characters.
inline constexpr size_t kMaxShown = 40;

// `value` quoted for an error message, cut to kMaxShown characters.
inline std::string Shown(absl::string_view value) {
  if (value.size() <= kMaxShown) return absl::StrCat("\"", value, "\"");
  return absl::StrCat("\"", value.substr(0, kMaxShown), "...\"");
}

}  // namespace pst::worker::data_internal

#endif  // PST_DATA_READER_UTIL_H_
