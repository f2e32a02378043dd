// Edit distance, and the "did you mean" it drives: the closest of a set of
// names to a misspelt one, for the TF_CONFIG parser's task types and for
// unknown command-line flags. Pure functions; thread-safe.
#ifndef PST_COMMON_EDIT_DISTANCE_H_
#define PST_COMMON_EDIT_DISTANCE_H_

#include <cstddef>
#include <string_view>
#include <vector>

namespace pst::common {

// Levenshtein distance: the fewest single-character insertions, deletions
// and substitutions that turn `a` into `b`.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` within two edits, unless reaching it
// means replacing every character of the candidate (two edits turn any
// two-letter word into "ps"; that is no suggestion). Of equally close
// candidates, the first. Empty when none qualifies.
std::string_view ClosestName(std::string_view word,
                             const std::vector<std::string_view>& candidates);

}  // namespace pst::common

#endif  // PST_COMMON_EDIT_DISTANCE_H_
