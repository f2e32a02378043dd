// A real gRPC server with metrics on (StartServer with a process exporter):
// calls to the methods it serves are labelled by method, and calls to names
// it does not serve, however many, all count as one method, "unknown".
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "rpc/grpc_channel.h"
#include "common/http_get_for_test.h"
#include "common/metrics.h"
#include "proto/pstrain.grpc.pb.h"
#include "rpc/free_port_test_util.h"

namespace pst::rpc {
namespace {

using testing::FreePort;

// Calls per channel: a channel's HPACK compressor keeps every :path it has
// sent and scans them all for each call, so one channel for 10^5 distinct
// names would make the client, not the server, the test's cost.
constexpr size_t kCallsPerChannel = 4096;

// Makes unary calls to `methods` at `address`, `in_flight` at a time (a
// divisor of kCallsPerChannel); returns how many ended with each code.
std::map<grpc::StatusCode, int> CallAll(const std::string& address,
                                        const std::vector<std::string>& methods, size_t in_flight) {
  std::unique_ptr<grpc::GenericStub> stub;
  std::map<grpc::StatusCode, int> codes;
  grpc::Slice empty("");
  const grpc::ByteBuffer request(&empty, 1);  // an empty message (a default one is invalid)
  for (size_t begin = 0; begin < methods.size(); begin += in_flight) {
    if (begin % kCallsPerChannel == 0) {
      const int connection = 1 + static_cast<int>(begin / kCallsPerChannel);  // a new one
      stub = std::make_unique<grpc::GenericStub>(MakeChannel(address, RpcSettings(), connection));
    }
    const size_t end = std::min(methods.size(), begin + in_flight);
    std::vector<grpc::ClientContext> contexts(end - begin);
    std::vector<grpc::ByteBuffer> responses(end - begin);
    struct Batch {
      absl::Mutex mu;
      size_t done ABSL_GUARDED_BY(mu) = 0;
      size_t size = 0;
      bool Finished() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return done == size; }
    } batch;
    batch.size = end - begin;
    for (size_t i = begin; i < end; ++i) {
      SetDeadline(&contexts[i - begin], absl::Seconds(30));
      stub->UnaryCall(&contexts[i - begin], methods[i], grpc::StubOptions(), &request,
                      &responses[i - begin], [&](grpc::Status status) {
                        absl::MutexLock lock(&batch.mu);
                        ++codes[status.error_code()];
                        ++batch.done;
                      });
    }
    absl::MutexLock lock(&batch.mu);
    batch.mu.Await(absl::Condition(&batch, &Batch::Finished));
  }
  return codes;
}

TEST(GrpcServerMetricsTest, UnknownMethodsShareOneLabel_ServedOnesKeepTheirs) {
  absl::StatusOr<std::unique_ptr<common::MetricsExporter>> exporter =
      common::MetricsExporter::Start("127.0.0.1", 0, "ps:0");
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  proto::ParameterServer::CallbackService unimplemented;  // every method: UNIMPLEMENTED
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartServer(
      address, {{&unimplemented, proto::ParameterServer::service_full_name()}}, RpcSettings(),
      address, exporter->get());
  ASSERT_TRUE(server.ok()) << server.status();

  constexpr int kUnknownCalls = 100'000;
  std::mt19937_64 rng(1);
  std::vector<std::string> methods;
  for (int i = 0; i < kUnknownCalls; ++i) {
    methods.push_back(absl::StrCat("/random", rng() % 1'000'000'000, ".Service/M", rng()));
  }
  const std::string served =
      absl::StrCat("/", proto::ParameterServer::service_full_name(), "/Health");
  methods.push_back(served);
  std::map<grpc::StatusCode, int> codes = CallAll(address, methods, 256);
  EXPECT_EQ(codes[grpc::StatusCode::UNIMPLEMENTED], kUnknownCalls + 1);

  const absl::StatusOr<std::string> page =
      common::testing::HttpGet("127.0.0.1", (*exporter)->port(), "/metrics", absl::Seconds(30));
  ASSERT_TRUE(page.ok()) << page.status();
  std::vector<std::string> series;
  double unknown_calls = 0;
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    if (!absl::StartsWith(line, "pstrain_rpc_requests_total{")) continue;
    series.emplace_back(line);
    if (absl::StrContains(line, "method=\"unknown\"")) {
      ASSERT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &unknown_calls)) << line;
    }
  }
  // One series for the unknown names, one for the served method.
  ASSERT_EQ(series.size(), 2u) << absl::StrJoin(series, "\n").substr(0, 4000);
  EXPECT_EQ(unknown_calls, kUnknownCalls);
  EXPECT_TRUE(absl::StrContains(*page, absl::StrCat("method=\"", served, "\""))) << series[0];
  EXPECT_FALSE(absl::StrContains(*page, "/random"));
  (*server)->Shutdown();
}

}  // namespace
}  // namespace pst::rpc
