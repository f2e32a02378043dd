// The store's figures as Prometheus gauges and counters, read at every
// scrape.
#ifndef PST_PS_SERVER_STORE_STORE_METRICS_H_
#define PST_PS_SERVER_STORE_STORE_METRICS_H_

#include "common/metrics.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {

// `store` must outlive every scrape of `metrics`.
void ExportStoreMetrics(const VariableStore* store, common::MetricsExporter* metrics);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_STORE_METRICS_H_
