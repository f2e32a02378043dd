#include "common/metrics.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
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
}

int MetricsExporter::AddRefresher(std::function<void()> refresh) {
  return hook_->Add(std::move(refresh));
}

void MetricsExporter::RemoveRefresher(int id) { hook_->Remove(id); }

void MetricsExporter::SetRawMethods(std::vector<std::string> methods) {
  raw_methods_ = absl::flat_hash_set<std::string>(methods.begin(), methods.end());
}


void RaiseCounterTo(prometheus::Counter& counter, double total) {
  const double now = counter.Value();
  if (total > now) counter.Increment(total - now);
}

}  // namespace pst::common
