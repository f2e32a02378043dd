// Synthetic data sets named on the command line: --data=generate or
// --data=generate:key=value,... . A data set is written once to $TMPDIR
// (or /tmp) under a name made of its settings, so every task of a local
// cluster, and every later run, reads the same file.
#ifndef PST_DATA_GENERATED_H_
#define PST_DATA_GENERATED_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pst::data {

// The settings of a `generate[:key=value,...]` value, or nullopt for any
// other value of --data. Errors: InvalidArgument naming the item for a key
// not in `known` or a value that is not a positive integer.
absl::StatusOr<std::optional<std::map<std::string, int64_t>>> ParseGenerateSpec(
    const std::string& data, const std::vector<std::string>& known);

// $TMPDIR/<file_name> (or /tmp/<file_name>), written by write(partial path)
// and renamed into place, unless it already exists. When it writes, prints
// "pstrain: generated PATH: <what write returned>" on stdout.
// Errors: those of `write`; Internal when the rename fails.
absl::StatusOr<std::string> GenerateOnce(
    const std::string& file_name,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& write);

}  // namespace pst::data

#endif  // PST_DATA_GENERATED_H_
