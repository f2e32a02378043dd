// Prometheus metrics: every daemon can serve /metrics in the Prometheus text
// format on --metrics_port. The metrics, their registry and the text format
// are prometheus-cpp's (Debian's prometheus-cpp-dev, core library); the
// HTTP endpoint is a small server of our own on one thread, since Debian's
// civetweb (behind prometheus-cpp's Exposer) runs its handlers on 100 KB
// thread stacks, which a worker's scrape overflowed (SIGSEGV in mg_printf).
//
// A daemon's figures are mostly read when a scrape comes: each daemon adds
// a refresher that copies its live statistics (the ps's store, the chief's
// coordinator, the worker's step times) into the registry just before it
// is serialized, so the hot paths carry no instrumentation. Servers started
// with StartServer also count requests, their latency and the bytes they
// send, per method, through a gRPC server interceptor.
//
// Thread-safety: everything here may be used from any thread.
#ifndef PST_COMMON_METRICS_H_
#define PST_COMMON_METRICS_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace pst::common {

class MetricsExporter {
 public:
  // Serves the registry on 0.0.0.0:port (/metrics). Every metric carries
  // the label task="<task>" (ps:0, chief:0, ...). Errors: Unavailable
  // naming the port when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(int port, const std::string& task);
  ~MetricsExporter();

  prometheus::Registry& registry() { return *registry_; }
  const prometheus::Labels& labels() const { return labels_; }
  // Runs `refresh` before every scrape (on the exporter's thread) until
  // RemoveRefresher(the id returned) returns.
  int AddRefresher(std::function<void()> refresh);
  void RemoveRefresher(int id);

  // Server interceptors counting requests, latency and bytes received and
  // sent per method.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  RpcInterceptors();
  // Methods ("/pkg.Service/Method") served as raw callback methods, whose
  // requests arrive as grpc::ByteBuffer rather than as generated messages.
  // REQUIRES: called before RpcInterceptors (before the server starts).
  void SetRawMethods(std::vector<std::string> methods);

 private:
  class ScrapeHook;
  MetricsExporter() = default;

  // Answers HTTP requests on listen_fd_ until stop_ is set.
  void Serve();

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ScrapeHook> hook_;
  prometheus::Labels labels_;
  absl::flat_hash_set<std::string> raw_methods_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread server_;
};

// The process's exporter, or null when --metrics_port is 0. StartServer
// installs its interceptors.
void SetProcessMetrics(MetricsExporter* exporter);
MetricsExporter* ProcessMetrics();

// Raises `counter` to `total` (a cumulative figure read from elsewhere);
// never lowers it, so a source that restarts from zero does not make the
// counter go back.
void RaiseCounterTo(prometheus::Counter& counter, double total);

}  // namespace pst::common

#endif  // PST_COMMON_METRICS_H_
