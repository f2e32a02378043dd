#include "bench/cases.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/dense_ops.h"
#include "bench/plan.h"
#include "bench/ps_cluster.h"
#include "bench/worker_processes.h"
#include "client/grpc_ps_transport.h"
#include "client/ps_client.h"
#include "common/ps_transport.h"
#include "common/status_macros.h"

namespace pst::bench {
namespace {

// Zipf(s) ids over [0, n): rank k drawn with probability ~ 1/(k+1)^s, then
// scattered over the id space by a fixed bijection so that hot ids are not
// neighbours.
class ZipfIds {
 public:
  ZipfIds(int64_t n, double s) : n_(n), cdf_(n) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = sum;
    }
    for (double& c : cdf_) c /= sum;
    multiplier_ = 0x9E3779B1LL % n;
    while (multiplier_ < 1 || std::gcd(multiplier_, n) != 1) ++multiplier_;
  }
  int64_t Draw(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    int64_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    rank = std::min(rank, n_ - 1);
    return static_cast<int64_t>((static_cast<__int128>(rank) * multiplier_ + 12345) % n_);
  }

 private:
  int64_t n_;
  std::vector<double> cdf_;
  int64_t multiplier_ = 1;
};

// One worker thread's state, kept across cases: its transport (channels),
// its push counter (the ps ignore repeats of (worker, incarnation, step)).
struct Worker {
  int index = 0;
  uint64_t incarnation = 0;
  int64_t step = 0;
  std::shared_ptr<common::PsTransport> transport;
};

// Every dense size and op, in --rounds rounds: each round runs each case
// for its share of the budget, so load that comes and goes during the run
// falls on every size alike rather than on whichever ran then. Each case
// runs in each --workers_as, on `workers`' threads or on `processes`.
std::vector<Result> RunDense(const Options& options, PsCluster& cluster,
                             const proto::PlacementPlan& plan, std::vector<Worker>& workers,
                             WorkerProcesses* processes) {
  const int num_workers = static_cast<int>(workers.size());
  // What one size's operations in one wire setting use on threads, for
  // every round (addresses stay put).
  struct SizeState {
    client::Values grads;  // shared by every worker (read only)
    std::vector<std::unique_ptr<client::PsClient>> clients;
    std::vector<client::Values> values;
  };
  struct Case {
    Result result;
    std::vector<Op> ops;  // on threads
    DenseCase dense;      // in processes
  };
  std::vector<std::unique_ptr<SizeState>> sizes;
  std::vector<Case> cases;
  for (int64_t size : options.sizes) {
    for (const std::string& wire : options.wire) {
      auto state = std::make_unique<SizeState>();
      state->grads = DenseGradients(size);
      state->values.resize(num_workers);
      std::string error;
      for (int w = 0; options.WorkerThreads() && w < num_workers && error.empty(); ++w) {
        absl::StatusOr<std::unique_ptr<client::PsClient>> client = MakeDenseClient(
            plan, size, wire, workers[w].transport, workers[w].index, workers[w].incarnation);
        if (!client.ok()) {
          error = std::string(client.status().message());
        } else {
          state->clients.push_back(*std::move(client));
        }
      }
      for (const std::string op : {"push", "pull", "pushpull"}) {
        if (!options.Has(op)) continue;
        for (const std::string& as : options.workers_as) {
          Case c;
          c.result.op = op;
          c.result.size_floats = size;
          c.result.wire = wire;
          c.result.workers_as = as;
          c.dense = {op, size, wire};
          if (as == "threads") {
            c.result.error = error;
            for (int w = 0; w < num_workers && error.empty(); ++w) {
              c.ops.push_back(MakeDenseOp(op, state->clients[w].get(), size, &workers[w].step,
                                          &state->grads, &state->values[w]));
            }
          }
          cases.push_back(std::move(c));
        }
      }
      sizes.push_back(std::move(state));
    }
  }

  const absl::Duration budget = options.case_budget / options.rounds;
  const int min_iters = (options.min_iters + options.rounds - 1) / options.rounds;
  for (int round = 1; round <= options.rounds; ++round) {
    for (Case& c : cases) {
      if (!c.result.error.empty()) continue;
      std::printf("  round %d of %d: %s of %s floats in %s, worker %s ...\n", round,
                  options.rounds, c.result.op.c_str(), SizeName(c.result.size_floats).c_str(),
                  c.result.wire.c_str(), c.result.workers_as.c_str());
      std::fflush(stdout);
      if (c.result.workers_as == "processes") {
        processes->RunCase(cluster, c.dense, budget, min_iters, &c.result);
      } else {
        RunCase(cluster, c.ops, budget, min_iters, &c.result);
      }
    }
  }
  std::vector<Result> results;
  for (Case& c : cases) {
    FinishResult(&c.result);
    results.push_back(std::move(c.result));
  }
  return results;
}

// One row client per worker of `workers`, over `plan`.
absl::StatusOr<std::vector<std::unique_ptr<client::PsClient>>> MakeClients(
    const proto::PlacementPlan& plan, const std::vector<Worker>& workers) {
  std::vector<std::unique_ptr<client::PsClient>> clients;
  for (const Worker& w : workers) {
    PST_ASSIGN_OR_RETURN(std::unique_ptr<client::PsClient> client,
                         client::PsClient::Create(plan, {}, w.transport, w.index, w.incarnation));
    clients.push_back(std::move(client));
  }
  return clients;
}

std::vector<Result> RunSparse(const Options& options, PsCluster& cluster,
                              const proto::PlacementPlan& plan, std::vector<Worker>& workers) {
  std::vector<Result> results;
  const int num_workers = static_cast<int>(workers.size());
  const int dim = options.dim;
  // Id batches drawn up front, so drawing is not timed.
  constexpr int kBatches = 32;
  const ZipfIds zipf(options.table_rows, options.zipf_s);
  struct Batch {
    std::vector<int64_t> ids;
    int64_t unique = 0;
  };
  std::vector<std::vector<Batch>> batches(num_workers);
  for (int w = 0; w < num_workers; ++w) {
    std::mt19937_64 rng(1000 + w);
    for (int b = 0; b < kBatches; ++b) {
      Batch batch;
      for (int i = 0; i < options.rows; ++i) batch.ids.push_back(zipf.Draw(rng));
      batch.unique =
          static_cast<int64_t>(std::set<int64_t>(batch.ids.begin(), batch.ids.end()).size());
      batches[w].push_back(std::move(batch));
    }
  }
  const client::Values grads = {std::vector<float>(static_cast<size_t>(options.rows) * dim, 1e-3f)};

  absl::StatusOr<std::vector<std::unique_ptr<client::PsClient>>> made = MakeClients(plan, workers);
  if (!made.ok()) {
    Result r;
    r.op = "sparse";
    r.error = std::string(made.status().message());
    return {r};
  }
  std::vector<std::unique_ptr<client::PsClient>> clients = *std::move(made);
  std::vector<client::Values> out(num_workers);
  std::vector<int> next(num_workers, 0);

  for (const std::string op : {"sparse_pull", "sparse_push"}) {
    if (!options.Has(op)) continue;
    std::vector<Op> ops;
    for (int w = 0; w < num_workers; ++w) {
      client::PsClient* client = clients[w].get();
      Worker* me = &workers[w];
      const std::vector<Batch>* mine = &batches[w];
      int* cursor = &next[w];
      client::Values* values = &out[w];
      // Ids go out (8 bytes each) and rows come back or go out (dim floats),
      // both for distinct ids only: the client sends each id once.
      const bool pull = op == "sparse_pull";
      ops.push_back([=, &grads]() -> absl::StatusOr<double> {
        const Batch& batch = (*mine)[(*cursor)++ % kBatches];
        const client::PsClient::TableIds tables[] = {{kTable, batch.ids}};
        if (pull) {
          PST_RETURN_IF_ERROR(client->PullRows(tables, values));
        } else {
          ++me->step;
          PST_RETURN_IF_ERROR(client->PushRows(me->step, tables, grads));
        }
        return static_cast<double>(batch.unique) * (8.0 + 4.0 * dim);
      });
    }
    Result r;
    r.op = op;
    r.rows = options.rows;
    r.dim = dim;
    r.table_rows = options.table_rows;
    std::printf("  running %s of %d rows x %d ...\n", op.c_str(), options.rows, dim);
    std::fflush(stdout);
    RunCase(cluster, ops, options.case_budget, options.min_iters, &r);
    FinishResult(&r);
    if (r.error.empty() && r.seconds > 0) {
      r.rows_per_s = static_cast<double>(r.ops) * options.rows / r.seconds;
      r.unique_rows_per_s = r.bytes / (8.0 + 4.0 * dim) / r.seconds;
    }
    results.push_back(r);
  }
  return results;
}

// The hash cases' id batches: --hash_batches per worker from the Zipf law
// of the sparse cases, drawn up front (not timed), and the distinct ids of
// all.
struct HashBatches {
  std::vector<std::vector<std::vector<int64_t>>> ids;  // [worker][batch]
  std::vector<std::vector<int64_t>> unique;            // [worker][batch]
  int64_t distinct = 0;
};

HashBatches DrawHashBatches(const Options& options, int num_workers) {
  HashBatches out;
  const ZipfIds zipf(options.table_rows, options.zipf_s);
  std::set<int64_t> all;
  out.ids.resize(num_workers);
  out.unique.resize(num_workers);
  for (int w = 0; w < num_workers; ++w) {
    std::mt19937_64 rng(2000 + w);
    for (int b = 0; b < options.hash_batches; ++b) {
      std::vector<int64_t> ids;
      for (int i = 0; i < options.rows; ++i) ids.push_back(zipf.Draw(rng));
      const std::set<int64_t> unique(ids.begin(), ids.end());
      all.insert(unique.begin(), unique.end());
      out.unique[w].push_back(static_cast<int64_t>(unique.size()));
      out.ids[w].push_back(std::move(ids));
    }
  }
  out.distinct = static_cast<int64_t>(all.size());
  return out;
}

// Each partition's capacity in hash_push_evict: the share
// --hash_capacity_fraction of the distinct ids, over the partitions.
int64_t HashCapacity(const Options& options, const HashBatches& batches, int num_ps) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(options.hash_capacity_fraction * batches.distinct / num_ps));
}

// hash_push into the unbounded table and hash_push_evict into the bounded
// one, the same batches, in alternate rounds (so load that comes and goes
// falls on both alike). Both tables first take every batch once, untimed:
// the unbounded one then holds every id (its pushes make no more rows), the
// bounded one is full and evicts as it will go on doing. The evictions are
// the ps's own count (Health.table_evictions) read around each round.
std::vector<Result> RunHash(const Options& options, PsCluster& cluster,
                            const proto::PlacementPlan& plan, std::vector<Worker>& workers,
                            const HashBatches& batches) {
  const int num_workers = static_cast<int>(workers.size());
  const int dim = options.dim;
  const int64_t capacity = HashCapacity(options, batches, cluster.size());
  const client::Values grads = {std::vector<float>(static_cast<size_t>(options.rows) * dim, 1e-3f)};
  absl::StatusOr<std::vector<std::unique_ptr<client::PsClient>>> made = MakeClients(plan, workers);
  if (!made.ok()) {
    Result r;
    r.op = "hash_push";
    r.error = std::string(made.status().message());
    return {r};
  }
  std::vector<std::unique_ptr<client::PsClient>> clients = *std::move(made);
  struct Case {
    Result result;
    std::string table;
    std::vector<Op> ops;
  };
  std::vector<Case> cases;
  std::vector<std::vector<int>> next(2, std::vector<int>(num_workers, 0));
  for (const std::string op : {"hash_push", "hash_push_evict"}) {
    if (!options.Has(op)) continue;
    Case c;
    const bool evict = op == "hash_push_evict";
    c.table = evict ? kHashTableEvict : kHashTable;
    c.result.op = op;
    c.result.rows = options.rows;
    c.result.dim = dim;
    c.result.table_rows = options.table_rows;
    c.result.distinct_ids = batches.distinct;
    c.result.capacity = evict ? capacity : 0;
    c.result.eviction = evict ? options.hash_eviction : "";
    c.result.disk_tier = evict && !options.table_store_dir.empty();
    c.result.hash_batches = options.hash_batches;
    const int num_batches = options.hash_batches;
    for (int w = 0; w < num_workers; ++w) {
      client::PsClient* client = clients[w].get();
      Worker* me = &workers[w];
      const std::vector<std::vector<int64_t>>* mine = &batches.ids[w];
      const std::vector<int64_t>* unique = &batches.unique[w];
      int* cursor = &next[evict ? 1 : 0][w];
      const std::string table = c.table;
      c.ops.push_back([=, &grads]() -> absl::StatusOr<double> {
        const int b = (*cursor)++ % num_batches;
        const client::PsClient::TableIds tables[] = {{table, (*mine)[b]}};
        ++me->step;
        PST_RETURN_IF_ERROR(client->PushRows(me->step, tables, grads));
        return static_cast<double>((*unique)[b]) * (8.0 + 4.0 * dim);
      });
    }
    cases.push_back(std::move(c));
  }
  // Every batch once into each table, untimed.
  std::printf(
      "  filling the hash tables (%lld distinct ids; bounded: %lld rows per partition, "
      "%s) ...\n",
      static_cast<long long>(batches.distinct), static_cast<long long>(capacity),
      options.hash_eviction.c_str());
  std::fflush(stdout);
  for (Case& c : cases) {
    for (int w = 0; w < num_workers && c.result.error.empty(); ++w) {
      for (int b = 0; b < options.hash_batches; ++b) {
        absl::StatusOr<double> moved = c.ops[w]();
        if (!moved.ok()) {
          c.result.error = absl::StrCat("filling ", c.table, ": ", moved.status().message());
          break;
        }
      }
    }
  }
  const absl::Duration budget = options.case_budget / options.rounds;
  const int min_iters = (options.min_iters + options.rounds - 1) / options.rounds;
  std::vector<int64_t> all_ops(cases.size(), 0);  // timed operations and warm-ups
  for (int round = 1; round <= options.rounds; ++round) {
    for (size_t i = 0; i < cases.size(); ++i) {
      Case& c = cases[i];
      if (!c.result.error.empty()) continue;
      std::printf("  round %d of %d: %s of %d rows x %d ...\n", round, options.rounds,
                  c.result.op.c_str(), options.rows, dim);
      std::fflush(stdout);
      const absl::StatusOr<int64_t> before = cluster.TableEvictions();
      const size_t timed_before = c.result.latencies_ms.size();
      RunCase(cluster, c.ops, budget, min_iters, &c.result);
      const absl::StatusOr<int64_t> after = cluster.TableEvictions();
      if (!before.ok() || !after.ok()) {
        if (c.result.error.empty()) {
          c.result.error = std::string((before.ok() ? after : before).status().message());
        }
        continue;
      }
      c.result.evictions += *after - *before;
      all_ops[i] += static_cast<int64_t>(c.result.latencies_ms.size() - timed_before) + num_workers;
    }
  }
  std::vector<Result> results;
  for (size_t i = 0; i < cases.size(); ++i) {
    Result& r = cases[i].result;
    FinishResult(&r);
    if (r.error.empty() && r.seconds > 0) {
      r.rows_per_s = static_cast<double>(r.ops) * options.rows / r.seconds;
      r.unique_rows_per_s = r.bytes / (8.0 + 4.0 * dim) / r.seconds;
      // Each round's warm-up operations evict too but are not timed: the
      // rate is the evictions per operation times the timed operations per
      // second.
      if (all_ops[i] > 0) {
        r.evictions_per_s = static_cast<double>(r.evictions) / all_ops[i] * r.ops / r.seconds;
      }
    }
    results.push_back(r);
  }
  if (results.size() == 2 && results[0].error.empty() && results[1].error.empty() &&
      results[0].rows_per_s > 0) {
    results[1].ratio_to_unbounded = results[1].rows_per_s / results[0].rows_per_s;
  }
  return results;
}

}  // namespace

absl::Status RunConfig(const Options& options, int num_ps, int num_workers,
                       std::vector<Result>* results) {
  std::printf("\n== %d ps, %d worker(s)%s%s\n", num_ps, num_workers,
              options.ps_replicas == 2 ? ", each shard backed up on the next ps" : "",
              options.link_rate.empty()
                  ? ""
                  : absl::StrCat(", each ps behind a ", options.link_rate, " link").c_str());
  std::fflush(stdout);
  PST_ASSIGN_OR_RETURN(std::unique_ptr<PsCluster> cluster,
                       PsCluster::Start(options, num_ps, num_workers));
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan plan, BuildPlan(options, num_ps));
  proto::OptimizerConfig sgd;
  sgd.set_name("sgd");
  sgd.set_learning_rate(1e-6f);
  const absl::Time create_start = absl::Now();
  if (options.ps_replicas == 2 && num_ps < 2) {
    return absl::InvalidArgumentError("--ps_replicas=2 needs --ps of 2 or more");
  }
  HashBatches hash_batches;
  if (options.AnyHash()) {
    hash_batches = DrawHashBatches(options, num_workers);
    if (options.Has("hash_push")) {
      PST_RETURN_IF_ERROR(AddHashTable(kHashTable, options.dim, 0, "", &plan));
    }
    if (options.Has("hash_push_evict")) {
      PST_RETURN_IF_ERROR(AddHashTable(kHashTableEvict, options.dim,
                                       HashCapacity(options, hash_batches, num_ps),
                                       options.hash_eviction, &plan));
    }
  }
  PST_RETURN_IF_ERROR(cluster->CreateVariables(plan, sgd, num_workers, options.ps_replicas));
  std::printf("  created %.1f MB of variables on %d ps in %.1f s (ps rss %.0f MB)\n",
              PlanBytes(plan) / 1e6, num_ps, absl::ToDoubleSeconds(absl::Now() - create_start),
              cluster->MemoryBytes("VmRSS") / 1e6);
  std::fflush(stdout);

  std::vector<Worker> workers(num_workers);
  std::mt19937_64 rng(absl::ToUnixNanos(absl::Now()));
  for (int w = 0; w < num_workers; ++w) {
    workers[w].index = w;
    workers[w].incarnation = rng() | 1;
    workers[w].transport =
        client::MakeGrpcPsTransport(cluster->addresses(), options.Rpc(), options.rpc_timeout);
  }
  if (options.AnyDense()) {
    std::unique_ptr<WorkerProcesses> processes;
    if (options.WorkerProcesses()) {
      PST_ASSIGN_OR_RETURN(processes,
                           WorkerProcesses::Start(options, plan, *cluster, num_workers));
    }
    for (Result& r : RunDense(options, *cluster, plan, workers, processes.get())) {
      r.ps = num_ps;
      r.workers = num_workers;
      results->push_back(std::move(r));
    }
  }
  if (options.AnySparse()) {
    for (Result& r : RunSparse(options, *cluster, plan, workers)) {
      r.ps = num_ps;
      r.workers = num_workers;
      results->push_back(std::move(r));
    }
  }
  if (options.AnyHash()) {
    for (Result& r : RunHash(options, *cluster, plan, workers, hash_batches)) {
      r.ps = num_ps;
      r.workers = num_workers;
      results->push_back(std::move(r));
    }
  }
  std::printf("  ps peak rss %.0f MB for %.0f MB of variables\n",
              cluster->MemoryBytes("VmHWM") / 1e6, PlanBytes(plan) / 1e6);
  workers.clear();  // channels closed before the ps go
  cluster->Stop();
  return absl::OkStatus();
}

}  // namespace pst::bench
