// libFuzzer target: the TF_CONFIG parser. Any bytes must give a config or
// an error, never a crash; an accepted config must survive a round trip
// through TfConfigToJson unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/tf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pst::common::TfConfig> parsed = pst::common::ParseTfConfig(json);
  if (!parsed.ok()) return 0;
  absl::StatusOr<pst::common::TfConfig> again =
      pst::common::ParseTfConfig(pst::common::TfConfigToJson(*parsed));
  if (!again.ok() || pst::common::TfConfigToJson(*again) != pst::common::TfConfigToJson(*parsed)) {
    std::abort();  // a config we accept must print as one we accept the same
  }
  return 0;
}
