#include "common/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pst::common {

namespace {

using Clock = std::chrono::steady_clock;

// Connections accepted per poll round at most, so that a flood of them
// cannot keep the loop from serving the ones it holds.
constexpr int kAcceptsPerRound = 64;
// How long to stop accepting after accept() fails for want of resources
// (no file descriptors left): the listening socket stays readable, and
// polling it again at once would spin.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// "::1" for "[::1]".
std::string BareHost(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// A listening, non-blocking socket on the first of host:port's addresses
// that can be bound. Errors: Unavailable with the reason.
absl::StatusOr<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string bare = BareHost(host);
  const int resolved = getaddrinfo(bare.empty() ? nullptr : bare.c_str(),
                                   std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) return absl::UnavailableError(gai_strerror(resolved));
  std::string reason = "no address";
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      reason = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(reason);
  return fd;
}

// "127.0.0.1:9090" or "[::1]:9090" for a bound socket; sets *port.
std::string BoundAddress(int fd, int* port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof(host), service,
                  sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) != 0 ||
      !absl::SimpleAtoi(service, port)) {
    return "?";
  }
  return address.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", service)
                                       : absl::StrCat(host, ":", service);
}

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

}  // namespace

// One client's connection: its request as it arrives, then its answer.
struct HttpServer::Connection {
  int fd = -1;
  Clock::time_point deadline;  // to have sent its head, then to have taken the answer
  std::string request;
  bool answering = false;
  std::string response;
  size_t sent = 0;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              std::string path,
                                                              std::function<std::string()> body,
                                                              const Options& options) {
  absl::StatusOr<int> fd = Listen(host, port);
  if (!fd.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", fd.status().message()));
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->listen_fd_ = *fd;
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  server->address_ = BoundAddress(*fd, &server->port_);
  server->path_ = std::move(path);
  server->body_ = std::move(body);
  server->options_ = options;
  server->options_.max_connections = std::max(1, options.max_connections);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

HttpServer::~HttpServer() {
  if (thread_.joinable()) {
    eventfd_write(wake_fd_, 1);
    thread_.join();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void HttpServer::Serve() {
  const auto request_timeout = absl::ToChronoMilliseconds(options_.request_timeout);
  const size_t max_connections = static_cast<size_t>(options_.max_connections);
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  Clock::time_point accept_paused_until;
  while (true) {
    Clock::time_point now = Clock::now();
    const bool accepting = now >= accept_paused_until;
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    Clock::time_point wake = accepting ? Clock::time_point::max() : accept_paused_until;
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      wake = std::min(wake, c.deadline);
    }
    int timeout_ms = -1;
    if (wake != Clock::time_point::max()) {
      const int64_t left = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    // On a failure (EINTR) every revents stays 0: only the deadlines act.
    poll(fds.data(), fds.size(), timeout_ms);
    if (fds[0].revents != 0) break;
    now = Clock::now();
    size_t kept = 0;
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      bool open = true;
      if (fds[i + 2].revents != 0) open = c.answering ? Write(c) : Read(c);
      if (open && now >= c.deadline) {
        // Too slow to ask, or to take the answer: one try at saying so.
        if (!c.answering) Answer(c, "408 Request Timeout", "request not received in time\n");
        open = false;
      }
      if (!open) {
        close(c.fd);
        continue;
      }
      if (kept != i) connections[kept] = std::move(c);
      ++kept;
    }
    connections.resize(kept);
    if ((fds[1].revents & POLLIN) == 0) continue;
    for (int k = 0; k < kAcceptsPerRound; ++k) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_paused_until = now + kAcceptPause;
        }
        break;  // none left, or that one is gone already
      }
      Connection c;
      c.fd = fd;
      c.deadline = now + request_timeout;
      if (connections.size() >= max_connections) {
        Answer(c, "503 Service Unavailable", "too many connections\n");
        close(fd);
        continue;
      }
      connections.push_back(std::move(c));
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

bool HttpServer::Read(Connection& c) {
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) return false;  // gone before its request was whole
    if (n < 0) return WouldBlock();
    const size_t searched = c.request.size() < 3 ? 0 : c.request.size() - 3;
    c.request.append(buffer, static_cast<size_t>(n));
    const size_t head_end = c.request.find("\r\n\r\n", searched);
    if (head_end == std::string::npos && c.request.size() <= options_.max_request_bytes) continue;
    if (head_end == std::string::npos || head_end + 4 > options_.max_request_bytes) {
      return Answer(c, "431 Request Header Fields Too Large", "request too long\n");
    }
    // "GET /metrics HTTP/1.1": the method, the target, the version.
    const std::string_view line(c.request.data(), c.request.find("\r\n"));
    const size_t method_end = line.find(' ');
    if (method_end == std::string_view::npos || line.substr(0, method_end) != "GET") {
      return Answer(c, "405 Method Not Allowed", "only GET is served here\n");
    }
    std::string_view target = line.substr(method_end + 1);
    target = target.substr(0, target.find(' '));
    target = target.substr(0, target.find('?'));
    if (target != path_)
      return Answer(c, "404 Not Found", absl::StrCat("only ", path_, " is served here\n"));
    return Answer(c, "200 OK", body_());
  }
}

bool HttpServer::Write(Connection& c) {
  while (c.sent < c.response.size()) {
    const ssize_t n =
        send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return WouldBlock();
    c.sent += static_cast<size_t>(n);
  }
  return false;  // all sent: the connection is done
}

bool HttpServer::Answer(Connection& c, const char* status, const std::string& body) {
  const bool ok = std::string_view(status).starts_with("200");
  c.answering = true;
  c.deadline = Clock::now() + absl::ToChronoMilliseconds(options_.response_timeout);
  c.response = absl::StrCat(
      "HTTP/1.1 ", status, "\r\nContent-Type: text/plain; ", ok ? "version=0.0.4; " : "",
      "charset=utf-8\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  c.sent = 0;
  return Write(c);
}

}  // namespace pst::common
