// snapshot_bench: what a save of a ps's dense variables costs the pushes
// that go on during it, copied at the instant (VariableStore::Snapshot, as
// every save did before) against copy-on-write (a copy budget; the records
// read the variables as they are written: ps_server/store/dense_snapshot.h).
//
// One store holds --values_mb of dense values in pieces of --piece_kb (as
// the chief cuts a large variable), with Adam's two slots (so three times
// that in all). A pusher thread pushes one piece after another without
// pause, timing each push, while the main thread saves the store to a
// shard file in --dir: snapshot, then write. Per save it prints the time
// pushes were held for the snapshot's instant, the longest push and the
// 99th percentile during the save, the pushes made during it, the save's
// seconds, and the peak memory the save added (VmHWM over VmRSS before it,
// reset through /proc/self/clear_refs) as a share of the variables' bytes.
// The two kinds alternate, --rounds times.
//
// With --table_rows, the store also holds a hash table of that many rows
// (--table_dim floats, Adam's slots), and the pusher follows each dense
// push with a push of 1,024 rows drawn from 1.1 times as many ids (some
// rows are made). Copied at the instant, every row of the table is copied
// with pushes held; copy-on-write, the table is copied before the instant
// while pushes go on, into a file in --dir (as a ps's saves spill it into
// its checkpoint directory), and at the instant only the rows changed
// since.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/proc_stats.h"
#include "bench/table_spec.h"
#include "common/checkpoint_format.h"
#include "common/tensor_util.h"
#include "ps_server/store/variable_store.h"

ABSL_FLAG(int64_t, values_mb, 256, "Dense values, MB (the slots add twice that).");
ABSL_FLAG(int64_t, piece_kb, 512, "Bytes of values per piece (variable), KiB.");
ABSL_FLAG(double, copy_budget, 0.25, "Copy-on-write: the copies' budget, of the variables' bytes.");
ABSL_FLAG(int, rounds, 3, "Saves of each kind, alternating.");
ABSL_FLAG(std::string, dir, "/tmp", "Where the shard file goes (removed after each save).");
ABSL_FLAG(int64_t, table_rows, 0, "Rows of a hash table beside the dense variables (0: none).");
ABSL_FLAG(int, table_dim, 16, "Floats per row of the hash table (each of values and slots).");

namespace {

namespace proto = pst::proto;
using pst::common::ShardRecord;
using pst::ps::VariableStore;

int64_t StatusBytes(const std::string& field) {
  return pst::bench::ProcessMemoryBytes(getpid(), field);
}

void Check(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "snapshot_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Push latencies, recorded by the pusher while `recording`.
class Latencies {
 public:
  void Start() {
    absl::MutexLock lock(&mu_);
    recording_ = true;
    seconds_.clear();
  }
  std::vector<double> Stop() {
    absl::MutexLock lock(&mu_);
    recording_ = false;
    return seconds_;
  }
  void Add(double s) {
    absl::MutexLock lock(&mu_);
    if (recording_) seconds_.push_back(s);
  }

 private:
  absl::Mutex mu_;
  bool recording_ = false;
  std::vector<double> seconds_;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t piece_floats = absl::GetFlag(FLAGS_piece_kb) * 1024 / 4;
  const int64_t pieces =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_values_mb) * 1000000 / 4 / piece_floats);
  const int64_t table_rows = absl::GetFlag(FLAGS_table_rows);
  const int64_t table_dim = absl::GetFlag(FLAGS_table_dim);
  VariableStore store;
  {
    proto::CreateVariablesRequest create;
    create.mutable_optimizer()->set_name("adam");
    create.mutable_optimizer()->set_learning_rate(1e-4f);
    create.mutable_optimizer()->set_beta1(0.9f);
    create.mutable_optimizer()->set_beta2(0.999f);
    create.mutable_optimizer()->set_epsilon(1e-7f);
    for (int64_t p = 0; p < pieces; ++p) {
      proto::VariableSpec* spec = create.add_variables();
      spec->set_name(absl::StrCat("w/part_", p));
      spec->set_dtype(proto::DT_FLOAT32);
      spec->add_shape(piece_floats);
      spec->mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    }
    if (table_rows > 0) {
      *create.add_variables() = pst::bench::HashTableSpec(table_dim, proto::Initializer::ZEROS);
    }
    Check(store.Create(create).status(), "creating the variables");
  }
  // Row pushes of `n` ids from `first` on (the fill), or drawn (`rng`).
  auto row_push = [&](int64_t step, int64_t first, int64_t n, std::mt19937_64* rng) {
    proto::PushRowsRequest push;
    push.set_worker_index(1);
    push.set_incarnation(1);
    push.set_step(step);
    proto::RowIds* ids = push.add_rows();
    ids->set_name(pst::bench::kTablePartition);
    std::uniform_int_distribution<int64_t> id(0, table_rows + table_rows / 10);
    std::vector<int64_t> drawn;
    for (int64_t k = 0; k < n; ++k) drawn.push_back(rng != nullptr ? id(*rng) : first + k);
    std::sort(drawn.begin(), drawn.end());  // each id once in a push
    drawn.erase(std::unique(drawn.begin(), drawn.end()), drawn.end());
    for (int64_t i : drawn) ids->add_ids(i);
    const int64_t rows = static_cast<int64_t>(drawn.size());
    const std::vector<float> grad(static_cast<size_t>(rows * table_dim), 1e-3f);
    const std::vector<int64_t> shape = {rows, table_dim};
    pst::common::PackFloats(grad, pst::common::Shape(shape.begin(), shape.end()),
                            push.add_gradients());
    return push;
  };
  for (int64_t first = 0, step = 0; first < table_rows; first += 8192, ++step) {
    proto::PushRowsResponse response;
    Check(
        store.PushRows(row_push(step, first, std::min<int64_t>(8192, table_rows - first), nullptr),
                       &response),
        "filling the table");
  }
  const double variable_bytes =
      static_cast<double>(pieces * piece_floats + table_rows * table_dim) * 4 * 3;
  std::printf(
      "%lld pieces of %lld KiB and %lld table rows of %lld: %.0f MB of values and Adam "
      "slots\n",
      static_cast<long long>(pieces), static_cast<long long>(absl::GetFlag(FLAGS_piece_kb)),
      static_cast<long long>(table_rows), static_cast<long long>(table_dim), variable_bytes / 1e6);

  // One request per piece, made once: the pusher cycles through them.
  std::vector<proto::PushRequest> pushes(static_cast<size_t>(pieces));
  {
    std::vector<float> grad(static_cast<size_t>(piece_floats), 1e-3f);
    const std::vector<int64_t> shape = {piece_floats};
    for (int64_t p = 0; p < pieces; ++p) {
      proto::PushRequest& push = pushes[static_cast<size_t>(p)];
      push.set_worker_index(0);
      push.set_incarnation(1);
      push.add_names(absl::StrCat("w/part_", p));
      pst::common::PackFloats(grad, pst::common::Shape(shape.begin(), shape.end()),
                              push.add_gradients());
    }
  }
  Latencies latencies;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> pushed{0};
  std::thread pusher([&] {
    int64_t step = 0;
    std::mt19937_64 rng(11);
    while (!stop.load()) {
      proto::PushRequest& push = pushes[static_cast<size_t>(step % pieces)];
      push.set_step(step);
      push.set_position(step);
      ++step;
      proto::PushResponse response;
      const absl::Time start = absl::Now();
      Check(store.Push(push, &response), "pushing");
      latencies.Add(absl::ToDoubleSeconds(absl::Now() - start));
      pushed.fetch_add(1);
      if (table_rows <= 0) continue;
      const proto::PushRowsRequest rows = row_push(step, 0, 1024, &rng);
      proto::PushRowsResponse rows_response;
      const absl::Time rows_start = absl::Now();
      Check(store.PushRows(rows, &rows_response), "pushing rows");
      latencies.Add(absl::ToDoubleSeconds(absl::Now() - rows_start));
      pushed.fetch_add(1);
    }
  });

  const std::string path =
      absl::StrCat(absl::GetFlag(FLAGS_dir), "/snapshot_bench_", getpid(), ".pst");
  std::printf("%-14s %10s %12s %12s %8s %8s %12s\n", "save", "held ms", "max push ms",
              "p99 push ms", "pushes", "save s", "peak added");
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const double budget : {0.0, absl::GetFlag(FLAGS_copy_budget)}) {
      malloc_trim(0);
      std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
      const int64_t rss_before = StatusBytes("VmRSS");
      const int64_t pushed_before = pushed.load();
      latencies.Start();
      const absl::Time start = absl::Now();
      absl::Duration held;
      {
        // Copy-on-write as a ps saves: its tables' copy spilled beside the
        // shard.
        std::vector<ShardRecord> records = store.Snapshot(
            &held, nullptr, budget, nullptr, budget > 0 ? absl::GetFlag(FLAGS_dir) : "");
        Check(pst::common::WriteShardFile(path, records, nullptr), "writing the shard");
      }
      const double save_s = absl::ToDoubleSeconds(absl::Now() - start);
      std::vector<double> during = latencies.Stop();
      const int64_t added = StatusBytes("VmHWM") - rss_before;
      std::filesystem::remove(path);
      std::sort(during.begin(), during.end());
      const double max_ms = during.empty() ? 0 : during.back() * 1e3;
      const double p99_ms =
          during.empty() ? 0 : during[static_cast<size_t>(0.99 * (during.size() - 1))] * 1e3;
      std::printf("%-14s %10.2f %12.2f %12.2f %8lld %8.2f %11.2fx\n",
                  budget > 0 ? absl::StrCat("cow ", budget).c_str() : "copied",
                  absl::ToDoubleMilliseconds(held), max_ms, p99_ms,
                  static_cast<long long>(pushed.load() - pushed_before), save_s,
                  static_cast<double>(added) / variable_bytes);
      std::fflush(stdout);
    }
  }
  stop.store(true);
  pusher.join();
  return 0;
}
