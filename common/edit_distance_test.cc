#include "common/edit_distance.h"

#include <gtest/gtest.h>

namespace pst::common {
namespace {

TEST(EditDistanceTest, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("epochs", "epochs"), 0u);
  EXPECT_EQ(EditDistance("epoch", "epochs"), 1u);                 // one insertion
  EXPECT_EQ(EditDistance("workers", "worker"), 1u);               // one deletion
  EXPECT_EQ(EditDistance("learning-rate", "learning_rate"), 1u);  // one substitution
  EXPECT_EQ(EditDistance("wroker", "worker"), 2u);                // a swap is two edits
  EXPECT_EQ(EditDistance("", "ps"), 2u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(ClosestNameTest, Misspelling_SuggestsTheClosest) {
  const std::vector<std::string_view> flags = {"epochs", "workers", "checkpoint_dir",
                                               "checkpoint_every_epochs", "ps"};
  EXPECT_EQ(ClosestName("epoch", flags), "epochs");
  EXPECT_EQ(ClosestName("worker", flags), "workers");
  EXPECT_EQ(ClosestName("checkpointdir", flags), "checkpoint_dir");
  EXPECT_EQ(ClosestName("pss", flags), "ps");
}

TEST(ClosestNameTest, FarFromEveryName_SuggestsNothing) {
  const std::vector<std::string_view> names = {"chief", "worker", "ps", "evaluator"};
  EXPECT_EQ(ClosestName("scheduler", names), "");
  // Two edits would turn any two-letter word into "ps": no suggestion.
  EXPECT_EQ(ClosestName("xy", names), "");
  EXPECT_EQ(ClosestName("anything", {}), "");
}

TEST(ClosestNameTest, EquallyClose_SuggestsTheFirst) {
  EXPECT_EQ(ClosestName("l3", {"l1", "l2"}), "l1");
  EXPECT_EQ(ClosestName("l3", {"l2", "l1"}), "l2");
}

}  // namespace
}  // namespace pst::common
