#include "common/clock.h"

#include "absl/time/clock.h"

namespace pst::common {
namespace {

class Real final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  bool WaitFor(absl::Duration timeout, const StopSignal& stop) override {
    return stop.WaitFor(timeout);
  }
};

}  // namespace

Clock* RealClock() {
  static Clock* const clock = new Real();
  return clock;
}

}  // namespace pst::common
