// Logging setup shared by every binary: spdlog to stderr, each line tagged
// with the task ("ps:0") so interleaved logs stay readable.
#ifndef PST_COMMON_LOGGING_H_
#define PST_COMMON_LOGGING_H_

#include <string_view>

#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Debian's Abseil has its own string_view type (not std::string_view), so
// status messages need a formatter to be logged.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace pst::common {

// REQUIRES: called once, early in main().
void InitLogging(std::string_view task);

}  // namespace pst::common

#endif  // PST_COMMON_LOGGING_H_
