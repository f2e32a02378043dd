#include "bench/report.h"

#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "rpc/grpc_channel.h"

namespace pst::bench {
namespace {

std::string Rate(double per_s) {
  if (per_s >= 1e6) return absl::StrFormat("%.2fM", per_s / 1e6);
  if (per_s >= 1e3) return absl::StrFormat("%.1fK", per_s / 1e3);
  return absl::StrFormat("%.0f", per_s);
}

std::string ScalingNetwork(const Scaling& s) {
  return s.link_rate.empty() ? "loopback" : s.link_rate + " link per ps";
}

}  // namespace

void PrintReferences(const References& refs, double load_start, double load_end) {
  std::printf(
      "\nreferences: tcp 1 stream %.3f GB/s, 4 streams %.3f GB/s (best over message "
      "sizes); memcpy %.3f GB/s (%.0f MB buffers); load average %.2f at the start, "
      "%.2f at the end\n",
      refs.tcp_gbps, refs.tcp4_gbps, refs.memcpy_gbps, refs.memcpy_bytes / 1e6, load_start,
      load_end);
}

void PrintTable(const std::vector<Result>& results, const References& refs,
                const Options& options) {
  std::printf("\n%-19s %-10s %3s %3s %-4s %6s %8s %7s %9s %9s %9s %14s %8s %9s %9s\n", "op",
              "size", "ps", "w", "as", "ops", "GB/s", "x tcp", "p50 ms", "p99 ms", "rows/s",
              "(distinct)",
              "ps cpu", "client", "ps rss");
  std::printf("%-19s %-10s %3s %3s %-4s %6s %8s %7s %9s %9s %9s %14s %8s %9s %9s\n", "", "", "",
              "", "", "", "", "", "", "", "", "", "s/GB", "cpu s/GB", "MB");
  for (const Result& r : results) {
    const std::string size =
        r.size_floats > 0 ? SizeName(r.size_floats) : absl::StrCat(r.rows, "x", r.dim);
    const std::string op = r.wire.empty() || r.wire == "float32" ? r.op : r.op + "/" + r.wire;
    const char* as = r.workers_as == "processes" ? "proc" : "thr";
    if (!r.error.empty()) {
      std::printf("%-19s %-10s %3d %3d %-4s  FAILED: %s\n", op.c_str(), size.c_str(), r.ps,
                  r.workers, as, r.error.c_str());
      continue;
    }
    const bool sparse = r.rows > 0;
    std::printf(
        "%-19s %-10s %3d %3d %-4s %6lld %8.3f %7.3f %9.2f %9.2f %9s %14s %8.3f %9.3f %9.0f\n",
        op.c_str(), size.c_str(), r.ps, r.workers, as, static_cast<long long>(r.ops), r.gbps,
                refs.tcp_gbps > 0 ? r.gbps / refs.tcp_gbps : 0.0, r.p50_ms, r.p99_ms,
                sparse ? Rate(r.rows_per_s).c_str() : "-",
                sparse ? absl::StrCat("(", Rate(r.unique_rows_per_s), ")").c_str() : "",
                r.ps_cpu_s_per_gb, r.client_cpu_s_per_gb, r.ps_rss_bytes / 1e6);
  }
  std::printf(
      "\nGB/s: payload bytes pushed plus pulled per second, 1 GB = 1e9 bytes; x tcp: as a ratio "
      "of the one-stream TCP reference (%.2f GB/s). as: the workers ran as threads of ps_bench, "
      "sharing its process (thr), or as processes of their own (proc). rows/s: "
      "ids requested per second (repeats included), distinct rows in parentheses. ps cpu s/GB: "
      "CPU seconds of all ps processes per GB moved; client: the workers' (this process's, or "
      "the worker processes'). A /bf16 or /topk case moves less than float32: "
      "its GB/s counts the float32 bytes of the parameters pushed and pulled, as the training "
      "speed would.\n",
      refs.tcp_gbps);
  // bf16 against float32: the same op, size and cluster, measured in the
  // same rounds.
  for (const Result& half : results) {
    if (half.wire.empty() || half.wire == "float32" || !half.error.empty()) continue;
    for (const Result& full : results) {
      if (full.wire != "float32" || !full.error.empty() || full.op != half.op ||
          full.size_floats != half.size_floats || full.ps != half.ps ||
          full.workers != half.workers || full.workers_as != half.workers_as ||
          full.gbps <= 0) {
        continue;
      }
      std::printf("%s of %s (%d ps, %d w, %s): %s on the wire %.2fx float32's rate\n",
                  half.op.c_str(), SizeName(half.size_floats).c_str(), half.ps, half.workers,
                  half.workers_as.c_str(), half.wire.c_str(), half.gbps / full.gbps);
    }
  }
  // Worker processes against threads: the same op, size, wire and cluster,
  // in the same rounds.
  for (const Result& proc : results) {
    if (proc.workers_as != "processes" || !proc.error.empty()) continue;
    for (const Result& thr : results) {
      if (thr.workers_as != "threads" || !thr.error.empty() || thr.op != proc.op ||
          thr.size_floats != proc.size_floats || thr.wire != proc.wire || thr.ps != proc.ps ||
          thr.workers != proc.workers || thr.gbps <= 0 || thr.client_cpu_s_per_gb <= 0) {
        continue;
      }
      std::printf(
          "%s%s of %s (%d ps, %d w): worker processes %.2fx the threads' rate; CPU s/GB %.3f "
          "(ps) + %.3f (workers) against %.3f + %.3f\n",
          proc.op.c_str(), proc.wire == "float32" ? "" : ("/" + proc.wire).c_str(),
          SizeName(proc.size_floats).c_str(), proc.ps, proc.workers, proc.gbps / thr.gbps,
          proc.ps_cpu_s_per_gb, proc.client_cpu_s_per_gb, thr.ps_cpu_s_per_gb,
          thr.client_cpu_s_per_gb);
    }
  }
  for (const Result& r : results) {
    if (!r.error.empty() || r.op.rfind("hash_push", 0) != 0) continue;
    if (r.capacity == 0) {
      std::printf("%s (%d ps, %d w): unbounded table, %lld distinct ids in %d batches per worker; "
                  "%s rows/s\n",
                  r.op.c_str(), r.ps, r.workers, static_cast<long long>(r.distinct_ids),
                  r.hash_batches, Rate(r.rows_per_s).c_str());
      continue;
    }
    std::printf(
        "%s (%d ps, %d w): %lld rows per partition (%s%s), %.0f%% of the %lld distinct ids; %s "
        "rows/s = %.3fx the unbounded table's (alternate rounds); %lld evictions, %s per "
        "second\n",
        r.op.c_str(), r.ps, r.workers, static_cast<long long>(r.capacity), r.eviction.c_str(),
        r.disk_tier ? ", the rest on disk" : "",
        r.distinct_ids > 0 ? 100.0 * r.capacity * r.ps / r.distinct_ids : 0.0,
        static_cast<long long>(r.distinct_ids), Rate(r.rows_per_s).c_str(), r.ratio_to_unbounded,
        static_cast<long long>(r.evictions), Rate(r.evictions_per_s).c_str());
  }
  if (!options.link_rate.empty()) {
    std::printf(
        "Each ps sat behind a link shaped to %s each way (its own network namespace): compare "
        "GB/s with that rate per ps; x tcp still compares with loopback.\n",
        options.link_rate.c_str());
  }
  if (!options.bdp_probe) {
    std::printf(
        "Dense connections used a fixed %d MiB HTTP/2 window, no BDP probing "
        "(--bdp_probe=false).\n",
        rpc::kDenseWindowBytes >> 20);
  }
}

nlohmann::json ToJson(const std::vector<Result>& results, const References& refs,
                      const Options& options, double load_start, double load_end) {
  nlohmann::json j;
  j["loadavg_1m_start"] = load_start;
  j["loadavg_1m_end"] = load_end;
  j["tcp_reference_gbps"] = refs.tcp_gbps;
  j["tcp4_reference_gbps"] = refs.tcp4_gbps;
  j["memcpy_gbps"] = refs.memcpy_gbps;
  j["memcpy_bytes"] = refs.memcpy_bytes;
  nlohmann::json by = nlohmann::json::object(), by4 = nlohmann::json::object();
  for (const auto& [bytes, g] : refs.tcp_by_bytes) by[std::to_string(bytes)] = g;
  for (const auto& [bytes, g] : refs.tcp4_by_bytes) by4[std::to_string(bytes)] = g;
  j["tcp_reference_by_message_bytes"] = by;
  j["tcp4_reference_by_message_bytes"] = by4;
  j["cpus"] = std::thread::hardware_concurrency();
  j["seconds_per_case"] = absl::ToDoubleSeconds(options.case_budget);
  j["rounds"] = options.rounds;
  j["dense_piece_bytes"] = options.dense_piece_bytes;
  j["link_rate"] = options.link_rate;
  j["ps_replicas"] = options.ps_replicas;
  j["bdp_probe"] = options.bdp_probe;
  j["wire"] = options.wire;
  j["results"] = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json e;
    e["op"] = r.op;
    if (r.size_floats > 0) {
      e["size_floats"] = r.size_floats;
      e["wire"] = r.wire;
    }
    e["workers_as"] = r.workers_as;
    if (r.rows > 0) {
      e["rows"] = r.rows;
      e["dim"] = r.dim;
      e["table_rows"] = r.table_rows;
    }
    e["ps"] = r.ps;
    e["workers"] = r.workers;
    if (!r.error.empty()) {
      e["error"] = r.error;
      j["results"].push_back(e);
      continue;
    }
    e["ops"] = r.ops;
    e["seconds"] = r.seconds;
    e["bytes"] = r.bytes;
    e["gbps"] = r.gbps;
    e["ratio_to_tcp"] = refs.tcp_gbps > 0 ? r.gbps / refs.tcp_gbps : 0.0;
    if (r.size_floats > 0) {
      auto it = refs.tcp_by_bytes.find(r.size_floats * 4);
      if (it != refs.tcp_by_bytes.end() && it->second > 0) {
        e["ratio_to_tcp_same_size"] = r.gbps / it->second;
      }
    }
    if (r.rows > 0) {
      e["rows_per_s"] = r.rows_per_s;
      e["unique_rows_per_s"] = r.unique_rows_per_s;
    }
    if (r.op.rfind("hash_push", 0) == 0) {
      e["hash_batches"] = r.hash_batches;
      e["distinct_ids"] = r.distinct_ids;
      e["capacity_per_partition"] = r.capacity;
      if (r.capacity > 0) {
        e["eviction"] = r.eviction;
        e["disk_tier"] = r.disk_tier;
        e["evictions"] = r.evictions;
        e["evictions_per_s"] = r.evictions_per_s;
        e["ratio_to_unbounded"] = r.ratio_to_unbounded;
      }
    }
    e["p50_ms"] = r.p50_ms;
    e["p99_ms"] = r.p99_ms;
    e["max_ms"] = r.max_ms;
    e["ps_cpu_s_per_gb"] = r.ps_cpu_s_per_gb;
    e["client_cpu_s_per_gb"] = r.client_cpu_s_per_gb;
    e["ps_rss_bytes"] = r.ps_rss_bytes;
    j["results"].push_back(e);
  }
  return j;
}

void PrintScaling(const std::vector<Scaling>& scalings, const Options& options) {
  std::printf(
      "\nscaling: PushPull of %s floats by 2 workers (%s), against 1 ps and then 2 ps\n",
      SizeName(options.scaling_size).c_str(), options.ScalingWorkersAs().c_str());
  std::printf("  %-22s %10s %10s %12s\n", "network", "1 ps GB/s", "2 ps GB/s", "2 ps / 1 ps");
  for (const Scaling& s : scalings) {
    if (!s.skipped.empty() || !s.error.empty()) {
      std::printf("  %-22s %s: %s\n", ScalingNetwork(s).c_str(),
                  s.error.empty() ? "skipped" : "FAILED",
                  (s.error.empty() ? s.skipped : s.error).c_str());
      continue;
    }
    std::printf("  %-22s %10.3f %10.3f %11.2fx\n", ScalingNetwork(s).c_str(), s.one_ps_gbps,
                s.two_ps_gbps, s.one_ps_gbps > 0 ? s.two_ps_gbps / s.one_ps_gbps : 0.0);
  }
  std::printf(
      "On loopback the ps and the workers share this machine's cores, so a second ps adds no "
      "CPU; behind shaped links each ps has its own NIC, as on machines of their own.\n");
}

nlohmann::json ScalingJson(const std::vector<Scaling>& scalings, const Options& options) {
  nlohmann::json out = nlohmann::json::array();
  for (const Scaling& s : scalings) {
    nlohmann::json e = {{"op", "pushpull"},
                        {"size_floats", options.scaling_size},
                        {"workers", 2},
                        {"workers_as", options.ScalingWorkersAs()},
                        {"link_rate", s.link_rate}};
    if (!s.skipped.empty()) {
      e["skipped"] = s.skipped;
    } else if (!s.error.empty()) {
      e["error"] = s.error;
    } else {
      e["one_ps_gbps"] = s.one_ps_gbps;
      e["two_ps_gbps"] = s.two_ps_gbps;
      e["ratio"] = s.one_ps_gbps > 0 ? s.two_ps_gbps / s.one_ps_gbps : 0.0;
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace pst::bench
