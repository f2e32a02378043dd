// Prometheus metrics: every daemon can serve /metrics in the Prometheus text
// format on --metrics_port. The metrics, their registry and the text format
// are prometheus-cpp's (Debian's prometheus-cpp-dev, core library); the
// HTTP endpoint is a small server of our own (HttpServer: one thread polling
// a few connections, each with a deadline), since Debian's civetweb (behind
// prometheus-cpp's Exposer) runs its handlers on 100 KB thread stacks, which
// a worker's scrape overflowed (SIGSEGV in mg_printf).
//
// The port listens on the host the daemon's gRPC server does (--bind's host;
// every interface when --bind is empty).
//
// A daemon's figures are mostly read when a scrape comes: each daemon adds
// a refresher that copies its live statistics (the ps's store, the chief's
// coordinator, the worker's step times) into the registry just before it
// is serialized, so the hot paths carry no instrumentation. Servers started
// with StartServer also count requests per method (rpc/grpc_metrics.h).
// No gRPC here: what a ps, a model or the chief's job reads of metrics
// does not pull in gRPC.
//
// Thread-safety: everything here may be used from any thread.
#ifndef PST_COMMON_METRICS_H_
#define PST_COMMON_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace pst::common {

class MetricsExporter {
 public:
  // Serves the registry at /metrics on host:port (port 0: one the kernel
  // picks), within `http`'s limits. Daemons pass ListenHost(--bind), the
  // host their gRPC server listens on. Every metric carries the label
  // task="<task>" (ps:0, chief:0, ...). Errors: Unavailable naming the port
  // and the reason when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(
      const std::string& host, int port, const std::string& task,
      const HttpServer::Options& http = {});
  ~MetricsExporter();

  // Where /metrics is served: "0.0.0.0:9090", "127.0.0.1:9090".
  const std::string& address() const { return http_->address(); }
  int port() const { return http_->port(); }

  prometheus::Registry& registry() { return *registry_; }
  const prometheus::Labels& labels() const { return labels_; }
  // Runs `refresh` before every scrape (on the exporter's thread) until
  // RemoveRefresher(the id returned) returns.
  int AddRefresher(std::function<void()> refresh);
  void RemoveRefresher(int id);

  // Methods ("/pkg.Service/Method") served as raw callback methods, whose
  // requests arrive as grpc::ByteBuffer rather than as generated messages
  // (read by MetricsInterceptors, rpc/grpc_metrics.h).
  // REQUIRES: called before the server starts.
  void SetRawMethods(std::vector<std::string> methods);
  const absl::flat_hash_set<std::string>& raw_methods() const { return raw_methods_; }

 private:
  class ScrapeHook;
  MetricsExporter() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ScrapeHook> hook_;
  prometheus::Labels labels_;
  absl::flat_hash_set<std::string> raw_methods_;
  std::unique_ptr<HttpServer> http_;  // last: its thread reads the above
};

// Raises `counter` to `total` (a cumulative figure read from elsewhere);
// never lowers it, so a source that restarts from zero does not make the
// counter go back.
void RaiseCounterTo(prometheus::Counter& counter, double total);

}  // namespace pst::common

#endif  // PST_COMMON_METRICS_H_
