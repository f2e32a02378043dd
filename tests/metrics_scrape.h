// Test helpers for the daemons' /metrics pages: free ports to serve them
// on, and a page's body. Not for production code.
#ifndef PST_TESTS_METRICS_SCRAPE_H_
#define PST_TESTS_METRICS_SCRAPE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>

namespace pst::testing {

// Whether nothing listens on `port` (a bind to it succeeds).
inline bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// The first of `n` consecutive free ports in [20000, 50000), tried from a
// draw seeded by the process id and `salt` (tests running at once try
// different ones); -1 when 200 tries found none.
inline int ConsecutiveFreePorts(int n, unsigned salt = 0) {
  std::mt19937 rng(static_cast<unsigned>(getpid()) ^ salt);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = 20000 + static_cast<int>(rng() % 30000);
    bool all = true;
    for (int k = 0; k < n && all; ++k) all = PortFree(base + k);
    if (all) return base;
  }
  return -1;
}

// The body of GET /metrics on 127.0.0.1:port ("" on failure), each read
// waiting at most `timeout_s`.
inline std::string Scrape(int port, int timeout_s = 5) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace pst::testing

#endif  // PST_TESTS_METRICS_SCRAPE_H_
