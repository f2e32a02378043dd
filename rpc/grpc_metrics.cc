// The gRPC side of the metrics: a server interceptor counting requests,
// latency and bytes per method into a common::MetricsExporter's registry.
#include "rpc/grpc_metrics.h"

#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "google/protobuf/message_lite.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace pst::rpc {
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

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MetricsInterceptors(common::MetricsExporter& exporter, const std::vector<std::string>& served_methods) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<RpcInterceptorFactory>(
      std::make_shared<RpcMetrics>(exporter.registry(), exporter.labels()),
      absl::flat_hash_set<std::string>(served_methods.begin(), served_methods.end()),
      exporter.raw_methods()));
  return out;
}

}  // namespace pst::rpc
