#include "common/metrics.h"

#include <atomic>
#include <chrono>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message_lite.h"
#include "prometheus/collectable.h"
#include "prometheus/histogram.h"
#include "prometheus/text_serializer.h"

namespace pst::common {

// Refreshes, then returns the registry's families.
class MetricsExporter::ScrapeHook final : public prometheus::Collectable {
 public:
  explicit ScrapeHook(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}
  int Add(std::function<void()> refresh) {
    absl::MutexLock lock(&mu_);
    refreshers_.emplace(next_id_, std::move(refresh));
    return next_id_++;
  }
  void Remove(int id) {
    absl::MutexLock lock(&mu_);  // waits for a scrape that is refreshing
    refreshers_.erase(id);
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, refresh] : refreshers_) refresh();
    }
    return registry_->Collect();
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::map<int, std::function<void()>> refreshers_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

// Per method: requests by status code, latency, bytes sent.
class RpcMetrics {
 public:
  RpcMetrics(prometheus::Registry& registry, const prometheus::Labels& labels)
      : requests_(prometheus::BuildCounter()
                      .Name("pstrain_rpc_requests_total")
                      .Help("RPCs served, by method and status code")
                      .Labels(labels)
                      .Register(registry)),
        latency_(prometheus::BuildHistogram()
                     .Name("pstrain_rpc_duration_seconds")
                     .Help("Time from a request's arrival to its status, by method")
                     .Labels(labels)
                     .Register(registry)),
        sent_(prometheus::BuildCounter()
                  .Name("pstrain_rpc_sent_bytes_total")
                  .Help("Bytes of response messages sent, by method")
                  .Labels(labels)
                  .Register(registry)),
        received_(prometheus::BuildCounter()
                      .Name("pstrain_rpc_received_bytes_total")
                      .Help("Bytes of request messages received, by method")
                      .Labels(labels)
                      .Register(registry)) {}

  void Received(const std::string& method, size_t bytes) {
    if (bytes > 0) received_.Add({{"method", method}}).Increment(static_cast<double>(bytes));
  }

  void Record(const std::string& method, grpc::StatusCode code, double seconds, size_t bytes) {
    // Family::Add returns the existing child for labels already seen.
    requests_.Add({{"method", method}, {"code", std::to_string(static_cast<int>(code))}})
        .Increment();
    latency_.Add({{"method", method}}, Buckets()).Observe(seconds);
    if (bytes > 0) sent_.Add({{"method", method}}).Increment(static_cast<double>(bytes));
  }

 private:
  static const prometheus::Histogram::BucketBoundaries& Buckets() {
    static const prometheus::Histogram::BucketBoundaries buckets = {
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
        5, 10};
    return buckets;
  }

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& sent_;
  prometheus::Family<prometheus::Counter>& received_;
};

class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  // `method`: the label. `raw`: the request arrives as a grpc::ByteBuffer
  // (a raw callback method, or a method not served, which gRPC handles
  // generically), else as a generated protobuf message.
  RpcInterceptor(RpcMetrics* metrics, std::string method, bool raw)
      : metrics_(metrics), method_(std::move(method)), raw_(raw) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_INITIAL_METADATA)) {
      start_ = std::chrono::steady_clock::now();
    }
    if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_MESSAGE)) {
      // The request as the handler gets it: a byte buffer or a parsed
      // message (whose size is the bytes it came in, unknown fields kept).
      if (void* message = methods->GetRecvMessage(); message != nullptr) {
        metrics_->Received(
            method_, raw_ ? static_cast<grpc::ByteBuffer*>(message)->Length()
                          : static_cast<google::protobuf::MessageLite*>(message)->ByteSizeLong());
      }
    }
    if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_MESSAGE)) {
      const grpc::ByteBuffer* buffer = methods->GetSerializedSendMessage();
      if (buffer != nullptr) bytes_ += buffer->Length();
    }
    if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_STATUS)) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->Record(method_, methods->GetSendStatus().error_code(), seconds, bytes_);
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* metrics_;
  const std::string method_;
  const bool raw_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  size_t bytes_ = 0;
};

// Labels each call by its method when the server serves it, else as
// kUnknownMethod: the names clients call are theirs to choose.
class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  RpcInterceptorFactory(std::shared_ptr<RpcMetrics> metrics,
                        absl::flat_hash_set<std::string> served_methods,
                        absl::flat_hash_set<std::string> raw_methods)
      : metrics_(std::move(metrics)),
        served_methods_(std::move(served_methods)),
        raw_methods_(std::move(raw_methods)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method == nullptr || !served_methods_.contains(method)) {
      return new RpcInterceptor(metrics_.get(), kUnknownMethod, /*raw=*/true);
    }
    return new RpcInterceptor(metrics_.get(), method, raw_methods_.contains(method));
  }

 private:
  std::shared_ptr<RpcMetrics> metrics_;
  const absl::flat_hash_set<std::string> served_methods_;
  const absl::flat_hash_set<std::string> raw_methods_;
};

std::atomic<MetricsExporter*> process_metrics{nullptr};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& host, int port, const std::string& task, const HttpServer::Options& http) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->registry_ = std::make_shared<prometheus::Registry>();
  exporter->hook_ = std::make_shared<ScrapeHook>(exporter->registry_);
  exporter->labels_ = {{"task", task}};
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      host, port, "/metrics",
      [hook = exporter->hook_] { return prometheus::TextSerializer().Serialize(hook->Collect()); },
      http);
  if (!server.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "--metrics_port=", port, ": cannot serve /metrics: ", server.status().message()));
  }
  exporter->http_ = *std::move(server);
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  http_.reset();  // no scrape runs from here on
  if (ProcessMetrics() == this) SetProcessMetrics(nullptr);
}

int MetricsExporter::AddRefresher(std::function<void()> refresh) {
  return hook_->Add(std::move(refresh));
}

void MetricsExporter::RemoveRefresher(int id) { hook_->Remove(id); }

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MetricsExporter::RpcInterceptors(const std::vector<std::string>& served_methods) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<RpcInterceptorFactory>(
      std::make_shared<RpcMetrics>(*registry_, labels_),
      absl::flat_hash_set<std::string>(served_methods.begin(), served_methods.end()),
      raw_methods_));
  return out;
}

void MetricsExporter::SetRawMethods(std::vector<std::string> methods) {
  raw_methods_ = absl::flat_hash_set<std::string>(methods.begin(), methods.end());
}

void SetProcessMetrics(MetricsExporter* exporter) { process_metrics.store(exporter); }
MetricsExporter* ProcessMetrics() { return process_metrics.load(); }

void RaiseCounterTo(prometheus::Counter& counter, double total) {
  const double now = counter.Value();
  if (total > now) counter.Increment(total - now);
}

}  // namespace pst::common
