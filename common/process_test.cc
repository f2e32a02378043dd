// TuneForServing: what a daemon changes about its own process at start-up;
// PeakResidentBytes.
#include "common/process.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace pst::common {
namespace {

// Takes a then b, lets go, then takes b then a: an order no thread ever
// deadlocks on here (there is only one), but a lock-order inversion to a
// deadlock detector.
void InvertLockOrder() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

// The hazard TuneForServing removes: Debian's Abseil, which this project
// builds against, is compiled without NDEBUG, so its deadlock detector is on
// and kills the process over an inversion that never deadlocked. Without
// this, the next test would pass whether or not TuneForServing did anything.
TEST(TuneForServingDeathTest, Untuned_LockOrderInversion_AbortsTheProcess) {
  EXPECT_DEATH(InvertLockOrder(), "potential deadlock");
}

TEST(TuneForServingDeathTest, Tuned_LockOrderInversion_IsNoCrash) {
  EXPECT_EXIT(
      {
        TuneForServing();
        InvertLockOrder();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The peak follows memory the process touches, and stays after it is
// freed.
TEST(PeakResidentBytesTest, GrowsByWhatWasTouched_AndKeepsItAfterAFree) {
  const int64_t before = PeakResidentBytes();
  ASSERT_GT(before, 0);
  constexpr size_t kBytes = size_t{64} << 20;
  {
    std::vector<char> touched(kBytes, 1);  // every page written
    EXPECT_GE(PeakResidentBytes(), before + static_cast<int64_t>(kBytes) * 9 / 10);
  }
  EXPECT_GE(PeakResidentBytes(), before + static_cast<int64_t>(kBytes) * 9 / 10);
}

}  // namespace
}  // namespace pst::common
