// JSON messages between ps_bench and its worker processes, one per line,
// over a stream socket (socketpair) that each side owns an end of.
#ifndef PST_BENCH_MESSAGE_CHANNEL_H_
#define PST_BENCH_MESSAGE_CHANNEL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace pst::bench {

// Thread-compatible: one thread sends and receives on a channel.
class MessageChannel {
 public:
  // Owns `fd` (closed by the destructor).
  explicit MessageChannel(int fd) : fd_(fd) {}
  ~MessageChannel();
  MessageChannel(const MessageChannel&) = delete;
  MessageChannel& operator=(const MessageChannel&) = delete;

  // Writes `message` and a newline. Errors: Unavailable when the other end
  // is gone (EPIPE) or the write fails.
  absl::Status Send(const nlohmann::json& message);
  // The next message. Errors: DeadlineExceeded after `timeout` with none;
  // Unavailable at end of stream (the other end closed: its process
  // ended); DataLoss for a line that is not JSON.
  absl::StatusOr<nlohmann::json> Receive(absl::Duration timeout);

 private:
  int fd_;
  std::string pending_;  // bytes read past the last line taken
};

}  // namespace pst::bench

#endif  // PST_BENCH_MESSAGE_CHANNEL_H_
