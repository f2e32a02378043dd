// Test helpers: a blocking HTTP client of a few lines, every step bounded
// in time, for the /metrics endpoint's tests. Not for production code.
#ifndef PST_COMMON_HTTP_GET_FOR_TEST_H_
#define PST_COMMON_HTTP_GET_FOR_TEST_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace pst::common::testing {

// A TCP connection to ip:port (IPv4), or -1 with errno set.
inline int ConnectTo(const std::string& ip, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || inet_pton(AF_INET, ip.c_str(), &address.sin_addr) != 1) {
    if (fd >= 0) close(fd);
    errno = EINVAL;
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

// Reads from `fd` until the peer closes it or `timeout` passes. Errors:
// DeadlineExceeded when it stays open, Unavailable on a read error (a
// reset), with what came before in neither case.
inline absl::StatusOr<std::string> ReadToClose(int fd, absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  std::string data;
  while (true) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    if (left <= 0) return absl::DeadlineExceededError(absl::StrCat("open; read: ", data));
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buffer[65536];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return data;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(std::strerror(errno));
    }
    data.append(buffer, static_cast<size_t>(n));
  }
}

// Sends `request` to ip:port and returns the whole response (head and
// body), all within `timeout`.
inline absl::StatusOr<std::string> HttpExchange(const std::string& ip, int port,
                                                const std::string& request,
                                                absl::Duration timeout = absl::Seconds(10)) {
  const int fd = ConnectTo(ip, port);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
  timeval send_timeout{static_cast<time_t>(absl::ToInt64Seconds(timeout)) + 1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  absl::StatusOr<std::string> response = absl::UnavailableError("send failed");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    response = ReadToClose(fd, timeout);
  }
  close(fd);
  return response;
}

// GET `path` from ip:port: the whole response.
inline absl::StatusOr<std::string> HttpGet(const std::string& ip, int port,
                                           const std::string& path = "/metrics",
                                           absl::Duration timeout = absl::Seconds(10)) {
  return HttpExchange(ip, port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: test\r\n\r\n"),
                      timeout);
}

}  // namespace pst::common::testing

#endif  // PST_COMMON_HTTP_GET_FOR_TEST_H_
