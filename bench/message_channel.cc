#include "bench/message_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pst::bench {

MessageChannel::~MessageChannel() {
  if (fd_ >= 0) close(fd_);
}

absl::Status MessageChannel::Send(const nlohmann::json& message) {
  const std::string line = message.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    // MSG_NOSIGNAL: a closed peer is an error here, not a SIGPIPE.
    const ssize_t n = send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("sending: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> MessageChannel::Receive(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (const size_t end = pending_.find('\n'); end != std::string::npos) {
      const std::string line = pending_.substr(0, end);
      pending_.erase(0, end + 1);
      nlohmann::json message = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (message.is_discarded()) {
        return absl::DataLossError(absl::StrCat("not a JSON message: ", line.substr(0, 200)));
      }
      return message;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no message in ", absl::FormatDuration(timeout)));
    }
    // Whole milliseconds, rounded up, at most a minute a wait (an infinite
    // timeout too): an int of milliseconds cannot hold every Duration.
    const int wait_ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
                          60'000));
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    char buf[1 << 16];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("reading: ", std::strerror(errno)));
    if (n == 0) return absl::UnavailableError("the other end closed the channel");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace pst::bench
