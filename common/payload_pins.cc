#include "common/payload_pins.h"

namespace pst::common {

void PayloadPins::Add() {
  absl::MutexLock lock(&mu_);
  ++held_;
}

void PayloadPins::Release() {
  absl::MutexLock lock(&mu_);
  --held_;
}

void PayloadPins::WaitAllReleased() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* held) { return *held == 0; }, &held_));
}

int PayloadPins::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

}  // namespace pst::common
