#include "common/metrics.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
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
  // `raw`: the method takes its request as a grpc::ByteBuffer (a raw
  // callback method), else as a generated protobuf message.
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

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  RpcInterceptorFactory(std::shared_ptr<RpcMetrics> metrics,
                        absl::flat_hash_set<std::string> raw_methods)
      : metrics_(std::move(metrics)), raw_methods_(std::move(raw_methods)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const std::string method = info->method();
    return new RpcInterceptor(metrics_.get(), method, raw_methods_.contains(method));
  }

 private:
  std::shared_ptr<RpcMetrics> metrics_;
  const absl::flat_hash_set<std::string> raw_methods_;
};

std::atomic<MetricsExporter*> process_metrics{nullptr};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(int port,
                                                                       const std::string& task) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->registry_ = std::make_shared<prometheus::Registry>();
  exporter->hook_ = std::make_shared<ScrapeHook>(exporter->registry_);
  exporter->labels_ = {{"task", task}};
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 16) != 0) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("--metrics_port=", port, ": cannot serve /metrics there: ", reason));
  }
  exporter->listen_fd_ = fd;
  exporter->server_ = std::thread([e = exporter.get()] { e->Serve(); });
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  stop_ = true;
  if (server_.joinable()) server_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (ProcessMetrics() == this) SetProcessMetrics(nullptr);
}

void MetricsExporter::Serve() {
  while (!stop_) {
    pollfd listening{listen_fd_, POLLIN, 0};
    if (poll(&listening, 1, 200) <= 0) continue;  // wakes to check stop_
    const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    // One request per connection: read its head (2 s at most), answer, close.
    timeval timeout{2, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    std::string request;
    char buffer[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
      const ssize_t n = read(conn, buffer, sizeof(buffer));
      if (n <= 0) break;
      request.append(buffer, static_cast<size_t>(n));
    }
    std::string status = "404 Not Found", body = "only /metrics is served here\n";
    if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
      status = "200 OK";
      body = prometheus::TextSerializer().Serialize(hook_->Collect());
    }
    const std::string response =
        absl::StrCat("HTTP/1.1 ", status,
                     "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     "Content-Length: ",
                     body.size(), "\r\nConnection: close\r\n\r\n", body);
    size_t sent = 0;
    while (sent < response.size()) {
      const ssize_t n = send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    close(conn);
  }
}

int MetricsExporter::AddRefresher(std::function<void()> refresh) {
  return hook_->Add(std::move(refresh));
}

void MetricsExporter::RemoveRefresher(int id) { hook_->Remove(id); }

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MetricsExporter::RpcInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<RpcInterceptorFactory>(
      std::make_shared<RpcMetrics>(*registry_, labels_), raw_methods_));
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
