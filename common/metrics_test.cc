// The /metrics endpoint: it listens where it is told, answers a scrape
// while a slow client drips its request, closes that client at its
// deadline, and survives more connections than it serves at once.
#include "common/metrics.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_get_for_test.h"
#include "prometheus/counter.h"

namespace pst::common {
namespace {

using ::pst::common::testing::ConnectTo;
using ::pst::common::testing::HttpExchange;
using ::pst::common::testing::HttpGet;
using ::pst::common::testing::ReadToClose;
using Clock = std::chrono::steady_clock;

// An exporter on 127.0.0.1 (a free port) with one counter to look for.
std::unique_ptr<MetricsExporter> StartExporter(const HttpServer::Options& http) {
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start("127.0.0.1", 0, "test:0", http);
  EXPECT_TRUE(exporter.ok()) << exporter.status();
  if (!exporter.ok()) return nullptr;
  prometheus::BuildCounter()
      .Name("pstrain_test_total")
      .Help("A test counter")
      .Labels((*exporter)->labels())
      .Register((*exporter)->registry())
      .Add({})
      .Increment(7);
  return *std::move(exporter);
}

bool IsCompleteScrape(const absl::StatusOr<std::string>& response) {
  return response.ok() && absl::StartsWith(*response, "HTTP/1.1 200 OK\r\n") &&
         absl::StrContains(*response, "pstrain_test_total{task=\"test:0\"} 7\n");
}

TEST(MetricsExporterTest, ASlowClientDoesNotDelayAScrape_AndIsClosedAtItsDeadline) {
  HttpServer::Options http;
  http.request_timeout = absl::Seconds(2);
  std::unique_ptr<MetricsExporter> exporter = StartExporter(http);
  ASSERT_NE(exporter, nullptr);

  // A client that sends its request a byte every 100 ms, never finishing
  // the head (each byte well within the 2 s that SO_RCVTIMEO would allow),
  // until the server closes it; bounded to 15 s.
  const int slow = ConnectTo("127.0.0.1", exporter->port());
  ASSERT_GE(slow, 0) << std::strerror(errno);
  const Clock::time_point connected = Clock::now();
  Clock::time_point closed_at = Clock::time_point::max();
  std::string slow_got;
  std::thread dripper([&] {
    const std::string head = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    for (size_t i = 0; Clock::now() - connected < std::chrono::seconds(15); ++i) {
      const char byte = i < head.size() ? head[i] : 'a';
      if (send(slow, &byte, 1, MSG_NOSIGNAL) != 1) {
        closed_at = Clock::now();  // reset by the server
        return;
      }
      pollfd p{slow, POLLIN, 0};
      if (poll(&p, 1, 100) == 1) {  // the server answered or closed
        closed_at = Clock::now();
        absl::StatusOr<std::string> rest = ReadToClose(slow, absl::Seconds(5));
        slow_got = rest.ok() ? *rest : std::string(rest.status().message());
        return;
      }
    }
  });

  // Meanwhile other clients scrape, each answered whole and at once.
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point start = Clock::now();
    const absl::StatusOr<std::string> response =
        HttpGet("127.0.0.1", exporter->port(), "/metrics", absl::Seconds(1));
    EXPECT_TRUE(IsCompleteScrape(response)) << response.status() << response.value_or("");
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000));
  }
  dripper.join();
  close(slow);
  ASSERT_NE(closed_at, Clock::time_point::max()) << "the slow client was never closed";
  const double after_s = std::chrono::duration<double>(closed_at - connected).count();
  EXPECT_GE(after_s, 1.8);
  EXPECT_LE(after_s, 4.0);
  // When the answer beats the reset, it says why.
  if (!slow_got.empty() && absl::StartsWith(slow_got, "HTTP/")) {
    EXPECT_TRUE(absl::StartsWith(slow_got, "HTTP/1.1 408 ")) << slow_got;
  }
}

TEST(MetricsExporterTest, ConnectionsBeyondTheLimitAreRefused_AndLaterScrapesAnswered) {
  HttpServer::Options http;
  http.max_connections = 4;
  http.request_timeout = absl::Seconds(1);
  std::unique_ptr<MetricsExporter> exporter = StartExporter(http);
  ASSERT_NE(exporter, nullptr);

  // 100 idle connections at once: 4 are held until their deadline, the
  // others answered 503 at once.
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = ConnectTo("127.0.0.1", exporter->port());
    ASSERT_GE(fd, 0) << i << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  int refused = 0;
  int timed_out = 0;
  for (int fd : idle) {
    // Every one is closed by the server within its 1 s deadline and a margin.
    const absl::StatusOr<std::string> got = ReadToClose(fd, absl::Seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    if (absl::StartsWith(*got, "HTTP/1.1 503 ")) ++refused;
    if (absl::StartsWith(*got, "HTTP/1.1 408 ")) ++timed_out;
    close(fd);
  }
  // (A slot freed by a deadline may take one of the last few.)
  EXPECT_EQ(timed_out + refused, 100);
  EXPECT_GE(timed_out, 4);
  EXPECT_GE(refused, 50);

  // The server is still there, and serves again.
  const absl::StatusOr<std::string> response = HttpGet("127.0.0.1", exporter->port());
  EXPECT_TRUE(IsCompleteScrape(response)) << response.status() << response.value_or("");
}

TEST(MetricsExporterTest, AnswersOnlyGetMetrics_AndBoundsTheRequest) {
  std::unique_ptr<MetricsExporter> exporter = StartExporter({});
  ASSERT_NE(exporter, nullptr);
  const int port = exporter->port();
  EXPECT_TRUE(IsCompleteScrape(HttpGet("127.0.0.1", port, "/metrics?format=text")));
  EXPECT_TRUE(absl::StartsWith(HttpGet("127.0.0.1", port, "/").value_or(""), "HTTP/1.1 404 "));
  EXPECT_TRUE(absl::StartsWith(
      HttpExchange("127.0.0.1", port, "POST /metrics HTTP/1.1\r\n\r\n").value_or(""),
      "HTTP/1.1 405 "));
  const absl::StatusOr<std::string> huge = HttpExchange(
      "127.0.0.1", port,
      absl::StrCat("GET /metrics HTTP/1.1\r\nX-Big: ", std::string(9000, 'a'), "\r\n\r\n"));
  // The server answers 431 and closes with the rest unread: the client
  // sees the answer or, when the reset comes first, an error.
  if (huge.ok()) {
    EXPECT_TRUE(absl::StartsWith(*huge, "HTTP/1.1 431 ")) << *huge;
  } else {
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kUnavailable) << huge.status();
  }
  EXPECT_TRUE(IsCompleteScrape(HttpGet("127.0.0.1", port)));
}

// Whether something listening on every interface is reachable at `ip`.
bool LocalAddressWorks(const std::string& ip) {
  absl::StatusOr<std::unique_ptr<MetricsExporter>> any =
      MetricsExporter::Start("0.0.0.0", 0, "probe:0");
  if (!any.ok()) return false;
  const int fd = ConnectTo(ip, (*any)->port());
  if (fd < 0) return false;
  close(fd);
  return true;
}

TEST(MetricsExporterTest, ListensOnTheHostItIsGiven) {
  std::unique_ptr<MetricsExporter> exporter = StartExporter({});
  ASSERT_NE(exporter, nullptr);
  EXPECT_EQ(exporter->address(), absl::StrCat("127.0.0.1:", exporter->port()));
  EXPECT_TRUE(IsCompleteScrape(HttpGet("127.0.0.1", exporter->port())));
  // 127.0.0.2 is this machine too (all of 127/8 is loopback on Linux), but
  // not the address the socket is bound to.
  if (LocalAddressWorks("127.0.0.2")) {
    EXPECT_LT(ConnectTo("127.0.0.2", exporter->port()), 0);
    EXPECT_EQ(errno, ECONNREFUSED);
  } else {
    std::printf("127.0.0.2 is not local here: only the bound address was checked\n");
  }

  absl::StatusOr<std::unique_ptr<MetricsExporter>> every =
      MetricsExporter::Start("0.0.0.0", 0, "test:0");
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ((*every)->address(), absl::StrCat("0.0.0.0:", (*every)->port()));

  const absl::StatusOr<std::unique_ptr<MetricsExporter>> bad =
      MetricsExporter::Start("256.0.0.1", 0, "test:0");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "256.0.0.1")) << bad.status();
}

}  // namespace
}  // namespace pst::common
