// PayloadPins: how many payload slices a transport still holds. No gRPC
// here, so that the PsTransport interface (common/ps_transport.h) and all
// its callers stay free of it.
#ifndef PST_COMMON_PAYLOAD_PINS_H_
#define PST_COMMON_PAYLOAD_PINS_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pst::common {

// Counts the payload slices gRPC still holds. A call's completion does not
// mean gRPC is done with what it sent: after a cancellation or a deadline
// the transport may still be writing it. A caller waits here before it
// reuses or frees the buffers the slices point into. Thread-safe.
class PayloadPins {
 public:
  PayloadPins() = default;
  PayloadPins(const PayloadPins&) = delete;
  PayloadPins& operator=(const PayloadPins&) = delete;
  ~PayloadPins() { WaitAllReleased(); }

  void Add();
  void Release();
  // Returns once every added slice has been released.
  void WaitAllReleased();
  int held() const;

 private:
  mutable absl::Mutex mu_;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pst::common

#endif  // PST_COMMON_PAYLOAD_PINS_H_
