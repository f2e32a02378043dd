// The store's figures as Prometheus gauges and counters.
#include "ps_server/store/store_metrics.h"

#include "prometheus/counter.h"
#include "prometheus/gauge.h"

namespace pst::ps {

void ExportStoreMetrics(const VariableStore* store, common::MetricsExporter* metrics) {
  prometheus::Registry& r = metrics->registry();
  const prometheus::Labels& labels = metrics->labels();
  auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge& {
    return prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(r).Add({});
  };
  auto counter = [&](const char* name, const char* help) -> prometheus::Counter& {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(r).Add({});
  };
  prometheus::Gauge& variables = gauge("pstrain_ps_variables", "Variables (and pieces) held");
  prometheus::Gauge& elements = gauge("pstrain_ps_elements", "Parameters held (floats)");
  prometheus::Gauge& hash_rows =
      gauge("pstrain_ps_embedding_rows", "Rows held by hash embedding tables");
  prometheus::Gauge& staleness_max =
      gauge("pstrain_ps_staleness_max", "Largest staleness of an applied dense gradient");
  prometheus::Gauge& generation = gauge("pstrain_ps_generation", "Restore generation");
  prometheus::Counter& pushes = counter("pstrain_ps_pushes_applied_total", "Pushes applied");
  prometheus::Counter& gradients =
      counter("pstrain_ps_gradients_applied_total", "Dense gradients applied");
  prometheus::Counter& staleness =
      counter("pstrain_ps_staleness_sum_total",
              "Summed staleness of applied dense gradients (divide by "
              "pstrain_ps_gradients_applied_total for the mean)");
  prometheus::Counter& dropped =
      counter("pstrain_ps_stale_dropped_total", "Pushes dropped as too stale");
  prometheus::Counter& duplicates =
      counter("pstrain_ps_duplicates_ignored_total", "Repeated pushes recognized and ignored");
  prometheus::Counter& nonfinite =
      counter("pstrain_ps_nonfinite_skipped_total", "Gradient rows skipped for NaN or Inf");
  prometheus::Counter& apply =
      counter("pstrain_ps_apply_seconds_total",
              "Time spent applying pushes (optimizer and sync accumulation, waits for a variable's "
              "lock included), summed over threads");
  prometheus::Family<prometheus::Gauge>& table_rows =
      prometheus::BuildGauge()
          .Name("pstrain_ps_table_rows")
          .Help(
              "Rows this ps holds of each embedding table (hash tables and row-partitioned "
              "variables), by table")
          .Labels(labels)
          .Register(r);
  auto table_counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(r);
  };
  prometheus::Family<prometheus::Counter>* evictions = table_counter(
      "pstrain_ps_table_evictions_total",
      "Rows of each hash embedding table evicted by its policy (--table_eviction), by table");
  prometheus::Family<prometheus::Counter>* admissions = table_counter(
      "pstrain_ps_table_admissions_total",
      "Rows of each hash embedding table made by pushes (ids admitted), by table");
  prometheus::Family<prometheus::Counter>* refused =
      table_counter("pstrain_ps_table_refused_total",
                    "Pushed rows of each hash embedding table whose ids admission has not admitted "
                    "yet (their gradients dropped), by table");
  // The disk tier (--table_store_dir).
  prometheus::Family<prometheus::Gauge>& rows_on_disk =
      prometheus::BuildGauge()
          .Name("pstrain_ps_table_rows_on_disk")
          .Help("Rows of each hash embedding table this ps keeps on disk (--table_store_dir), "
                "by table")
          .Labels(labels)
          .Register(r);
  prometheus::Family<prometheus::Counter>* disk_reads = table_counter(
      "pstrain_ps_table_disk_reads_total",
      "Rows of each hash embedding table read from disk: pulled there or brought back by a "
      "push, by table");
  prometheus::Family<prometheus::Counter>* disk_writes = table_counter(
      "pstrain_ps_table_disk_writes_total",
      "Rows of each hash embedding table written to disk, evicted from memory, by table");
  metrics->AddRefresher([=, &variables, &elements, &hash_rows, &staleness_max, &generation, &pushes,
                         &gradients, &staleness, &dropped, &duplicates, &nonfinite, &apply,
                         &table_rows, &rows_on_disk] {
    const VariableStore::Stats s = store->GetStats();
    variables.Set(s.num_variables);
    elements.Set(static_cast<double>(s.num_elements));
    hash_rows.Set(static_cast<double>(s.hash_rows));
    staleness_max.Set(static_cast<double>(s.staleness_max));
    generation.Set(static_cast<double>(s.generation));
    common::RaiseCounterTo(pushes, s.pushes_applied);
    common::RaiseCounterTo(gradients, s.gradients_applied);
    common::RaiseCounterTo(staleness, s.staleness_sum);
    common::RaiseCounterTo(dropped, s.stale_dropped);
    common::RaiseCounterTo(duplicates, s.duplicates_ignored);
    common::RaiseCounterTo(nonfinite, s.nonfinite_skipped);
    common::RaiseCounterTo(apply, s.apply_seconds);
    for (const auto& [table, rows] : s.table_rows) {
      table_rows.Add({{"table", table}}).Set(static_cast<double>(rows));
    }
    for (const auto& [table, figures] : s.tables) {
      common::RaiseCounterTo(evictions->Add({{"table", table}}), figures.evictions);
      common::RaiseCounterTo(admissions->Add({{"table", table}}), figures.admissions);
      common::RaiseCounterTo(refused->Add({{"table", table}}), figures.refused);
      if (store->options().disk_tier == nullptr) continue;
      rows_on_disk.Add({{"table", table}}).Set(static_cast<double>(figures.rows_on_disk));
      common::RaiseCounterTo(disk_reads->Add({{"table", table}}), figures.disk_reads);
      common::RaiseCounterTo(disk_writes->Add({{"table", table}}), figures.disk_writes);
    }
  });
}

}  // namespace pst::ps
