// HttpServer: a minimal HTTP/1.x server for one read-only page, the
// daemons' Prometheus /metrics. It answers `GET <path>` with the body a
// callback returns, anything else with an error status, and closes every
// connection after one answer.
//
// No client can hold it: it serves at most Options::max_connections
// connections at once (one beyond that is answered 503 and closed at
// once); a request's head must arrive whole within
// Options::request_timeout of its connection's accept (a client that drips
// a byte at a time is answered 408 and closed at the deadline, however
// often it sends) and within Options::max_request_bytes (else 431); and the
// answer must be taken within Options::response_timeout. One thread of its
// own polls every connection, so a slow client only costs its slot.
//
// Thread-safety: Start and the destructor may be called from any thread;
// the body callback runs on the server's thread, one call at a time.
#ifndef PST_COMMON_HTTP_SERVER_H_
#define PST_COMMON_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pst::common {

class HttpServer {
 public:
  struct Options {
    int max_connections = 8;
    absl::Duration request_timeout = absl::Seconds(5);
    absl::Duration response_timeout = absl::Seconds(10);
    size_t max_request_bytes = 8192;
  };

  // Listens on host:port (host: an IPv4 or IPv6 address, with or without
  // brackets, or a name; port 0: one the kernel picks) and serves `path`
  // ("/metrics") with `body()`. Errors: Unavailable naming host:port and
  // the reason when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           std::string path,
                                                           std::function<std::string()> body,
                                                           const Options& options);
  // Stops serving: closes every connection and the listening socket.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Where the listening socket is bound, as getsockname() says:
  // "127.0.0.1:9090", "[::1]:9090".
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  struct Connection;
  HttpServer() = default;

  // Serves until wake_fd_ is signalled.
  void Serve();
  // Reads what `c` has sent; once its head is whole (or too long), starts
  // its answer. Returns false when the connection is done with.
  bool Read(Connection& c);
  // Sends what `c` has not taken yet. Returns false when done with.
  bool Write(Connection& c);
  // Starts answering `c` with `status` and `body`, then sends what fits.
  bool Answer(Connection& c, const char* status, const std::string& body);

  std::string path_;
  std::function<std::string()> body_;
  Options options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd the destructor writes to stop Serve
  std::string address_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace pst::common

#endif  // PST_COMMON_HTTP_SERVER_H_
