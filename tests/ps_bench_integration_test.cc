// ps_bench end to end, at a small scale: it starts a real ps_server, runs
// every case (the dense ones in rounds) against TCP and memcpy references,
// compares 1 ps with 2 (on loopback, and behind shaped links where this
// runs as root), and writes the JSON that scripts compare runs by. Figures
// are not checked against targets here (that belongs to a quiet machine),
// only that each case ran and reported them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

// Runs ps_bench with `flags`, writing its JSON to a file named `name`:
// that JSON, or a discarded value (a failure recorded, naming the output)
// when it did not run to exit code 0. `*output`: what it printed.
nlohmann::json RunBench(std::vector<std::string> flags, const std::string& name,
                        std::string* output) {
  const std::string json = TestDir() + "/" + name;
  flags.insert(flags.begin(), BinaryPath("ps_bench"));
  flags.push_back("--json=" + json);
  absl::StatusOr<std::unique_ptr<TestProcess>> bench = TestProcess::Start(flags);
  EXPECT_TRUE(bench.ok()) << bench.status();
  if (!bench.ok()) return nlohmann::json::value_t::discarded;
  std::optional<int> exited = (*bench)->WaitForExit(kTimeout);
  *output = (*bench)->output();
  EXPECT_TRUE(exited.has_value() && ExitCode(*exited) == 0) << *output;
  if (!exited.has_value() || ExitCode(*exited) != 0) return nlohmann::json::value_t::discarded;
  nlohmann::json j = ReadJsonFile(json);
  EXPECT_TRUE(j.is_object()) << *output;
  return j;
}

TEST(PsBenchTest, SmallRun_ReportsEveryCaseInTheJson) {
  std::string output;
  const nlohmann::json j =
      RunBench({"--sizes=64K,256K", "--seconds_per_case=0.3", "--reference_seconds=0.2",
                "--rounds=2", "--min_iters=4", "--rows=256", "--table_rows=20000",
                "--scaling_size=256K", "--scaling_link_rate=1gbit"},
               "bench.json", &output);
  ASSERT_TRUE(j.is_object());
  EXPECT_GT(j["tcp_reference_gbps"].get<double>(), 0);
  EXPECT_GT(j["memcpy_gbps"].get<double>(), 0);
  EXPECT_EQ(j["rounds"], 2);
  std::set<std::string> seen;
  for (const nlohmann::json& r : j["results"]) {
    SCOPED_TRACE(r.dump());
    ASSERT_FALSE(r.contains("error"));
    EXPECT_EQ(r["ps"], 1);
    EXPECT_EQ(r["workers"], 1);
    // At least --min_iters operations, split over the rounds (2 each).
    EXPECT_GE(r["ops"].get<int64_t>(), 4);
    EXPECT_GT(r["gbps"].get<double>(), 0);
    EXPECT_GT(r["ratio_to_tcp"].get<double>(), 0);
    EXPECT_GT(r["p50_ms"].get<double>(), 0);
    EXPECT_LE(r["p50_ms"].get<double>(), r["p99_ms"].get<double>());
    EXPECT_LE(r["p99_ms"].get<double>(), r["max_ms"].get<double>());
    EXPECT_GT(r["ps_cpu_s_per_gb"].get<double>(), 0);
    EXPECT_GT(r["ps_rss_bytes"].get<int64_t>(), 0);
    const std::string op = r["op"];
    if (r.contains("size_floats")) {
      seen.insert(op + "/" + std::to_string(r["size_floats"].get<int64_t>()));
      EXPECT_GT(r["ratio_to_tcp_same_size"].get<double>(), 0);
    } else {
      seen.insert(op);
      EXPECT_EQ(r["dim"], 64);
      EXPECT_GT(r["rows_per_s"].get<double>(), 0);
      EXPECT_LE(r["unique_rows_per_s"].get<double>(), r["rows_per_s"].get<double>());
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"push/65536", "pull/65536", "pushpull/65536",
                                         "push/262144", "pull/262144", "pushpull/262144",
                                         "sparse_pull", "sparse_push"}));

  // 1 ps against 2: on loopback always; behind 1gbit links as root.
  ASSERT_EQ(j["scaling"].size(), 2u) << j.dump(2);
  const bool can_shape = geteuid() == 0 && (access("/usr/sbin/ip", X_OK) == 0 ||
                                            access("/sbin/ip", X_OK) == 0 ||
                                            access("/usr/bin/ip", X_OK) == 0);
  for (const nlohmann::json& s : j["scaling"]) {
    SCOPED_TRACE(s.dump());
    EXPECT_EQ(s["size_floats"], 262144);
    EXPECT_EQ(s["workers"], 2);
    ASSERT_FALSE(s.contains("error"));
    if (s["link_rate"] == "1gbit" && !can_shape) {
      EXPECT_TRUE(s.contains("skipped"));
      continue;
    }
    EXPECT_GT(s["one_ps_gbps"].get<double>(), 0);
    EXPECT_GT(s["two_ps_gbps"].get<double>(), 0);
    EXPECT_NEAR(s["ratio"].get<double>(),
                s["two_ps_gbps"].get<double>() / s["one_ps_gbps"].get<double>(), 1e-9);
  }
  EXPECT_EQ(j["scaling"][0]["link_rate"], "");
  EXPECT_EQ(j["scaling"][1]["link_rate"], "1gbit");
}

TEST(PsBenchTest, HashCases_BoundedTableEvictsAndReportsItsShape) {
  std::string output;
  const nlohmann::json j =
      RunBench({"--cases=hash_push,hash_push_evict", "--ps=2", "--workers=2",
                "--seconds_per_case=0.4", "--rounds=2", "--min_iters=2", "--rows=256",
                "--table_rows=20000", "--hash_batches=6", "--scaling=false"},
               "hash.json", &output);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["results"].size(), 2u) << j.dump(2);
  const nlohmann::json& unbounded = j["results"][0];
  const nlohmann::json& bounded = j["results"][1];
  EXPECT_EQ(unbounded["op"], "hash_push");
  EXPECT_EQ(bounded["op"], "hash_push_evict");
  for (const nlohmann::json* r : {&unbounded, &bounded}) {
    SCOPED_TRACE(r->dump());
    ASSERT_FALSE(r->contains("error"));
    EXPECT_EQ((*r)["hash_batches"], 6);
    EXPECT_GT((*r)["rows_per_s"].get<double>(), 0);
  }
  // 6 batches of 256 draws per worker: more distinct ids than one batch
  // has, fewer than all the draws.
  const int64_t distinct = bounded["distinct_ids"];
  EXPECT_GT(distinct, 256);
  EXPECT_LT(distinct, 2 * 6 * 256);
  EXPECT_EQ(unbounded["capacity_per_partition"], 0);
  EXPECT_EQ(bounded["capacity_per_partition"].get<int64_t>(), distinct / 4 / 2);
  EXPECT_GT(bounded["evictions"].get<int64_t>(), 0);
  EXPECT_NEAR(bounded["ratio_to_unbounded"].get<double>(),
              bounded["rows_per_s"].get<double>() / unbounded["rows_per_s"].get<double>(), 1e-9);
}

TEST(PsBenchTest, Wire_EachDenseCaseInEachSetting_AsARatioOfFloat32) {
  std::string output;
  const nlohmann::json j = RunBench(
      {"--cases=pushpull", "--sizes=64K", "--wire=float32,bf16,topk:0.01", "--seconds_per_case=0.3",
       "--reference_seconds=0.2", "--rounds=2", "--min_iters=4", "--scaling=false"},
      "wire.json", &output);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["wire"], (nlohmann::json{"float32", "bf16", "topk:0.01"}));
  // Each setting with threads, then with worker processes (the default).
  ASSERT_EQ(j["results"].size(), 6u) << j.dump(2);
  const std::vector<std::string> wires = {"float32", "bf16", "topk:0.01"};
  for (size_t i = 0; i < 6; ++i) {
    const nlohmann::json& r = j["results"][i];
    SCOPED_TRACE(r.dump());
    ASSERT_FALSE(r.contains("error"));
    EXPECT_EQ(r["wire"], wires[i / 2]);
    EXPECT_EQ(r["workers_as"], i % 2 == 0 ? "threads" : "processes");
    EXPECT_EQ(r["op"], "pushpull");
    EXPECT_GE(r["ops"].get<int64_t>(), 4);
    EXPECT_GT(r["gbps"].get<double>(), 0);
  }
  for (const std::string as : {"threads", "processes"}) {
    for (const std::string wire : {"bf16", "topk:0.01"}) {
      EXPECT_NE(output.find("pushpull of 64K (1 ps, 1 w, " + as + "): " + wire + " on the wire "),
                std::string::npos)
          << output;
    }
  }
}

// Workers as processes of their own, beside threads, in the same rounds:
// each process's operations, bytes and CPU reach the figures.
TEST(PsBenchTest, WorkerProcesses_RunBesideThreads_EachCountedWhole) {
  std::string output;
  const nlohmann::json j =
      RunBench({"--cases=push,pushpull", "--sizes=64K", "--ps=2", "--workers=2",
                "--workers_as=threads,processes", "--seconds_per_case=0.4",
                "--reference_seconds=0.2", "--rounds=2", "--min_iters=4", "--scaling=false"},
               "processes.json", &output);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["results"].size(), 4u) << j.dump(2);
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& r = j["results"][i];
    SCOPED_TRACE(r.dump());
    ASSERT_FALSE(r.contains("error"));
    EXPECT_EQ(r["op"], i < 2 ? "push" : "pushpull");
    EXPECT_EQ(r["workers_as"], i % 2 == 0 ? "threads" : "processes");
    EXPECT_EQ(r["ps"], 2);
    EXPECT_EQ(r["workers"], 2);
    // --min_iters over 2 rounds, 2 each a round, from each of 2 workers.
    const int64_t ops = r["ops"];
    EXPECT_GE(ops, 8);
    // Every operation moved the whole variable (twice for pushpull).
    const double per_op = (i < 2 ? 1 : 2) * 65536.0 * 4;
    EXPECT_DOUBLE_EQ(r["bytes"].get<double>(), ops * per_op);
    EXPECT_GT(r["client_cpu_s_per_gb"].get<double>(), 0);
    EXPECT_GT(r["ps_cpu_s_per_gb"].get<double>(), 0);
  }
  EXPECT_NE(output.find("push of 64K (2 ps, 2 w): worker processes "), std::string::npos)
      << output;
  EXPECT_NE(output.find("pushpull of 64K (2 ps, 2 w): worker processes "), std::string::npos)
      << output;
}

TEST(PsBenchTest, BadFlags_ExitWithCodeTwoNamingThem) {
  for (const std::string flag : {"--rounds=0", "--scaling_size=3x", "--scaling_link_rate=fast",
                                 "--hash_batches=0", "--wire=fp16", "--workers_as=forks"}) {
    absl::StatusOr<std::unique_ptr<TestProcess>> bench =
        TestProcess::Start({BinaryPath("ps_bench"), "--cases=hash_push", flag});
    ASSERT_TRUE(bench.ok()) << bench.status();
    std::optional<int> exited = (*bench)->WaitForExit(kTimeout);
    ASSERT_TRUE(exited.has_value());
    EXPECT_EQ(ExitCode(*exited), 2) << flag;
    const std::string name = flag.substr(0, flag.find('='));
    EXPECT_NE((*bench)->output().find(name), std::string::npos) << (*bench)->output();
  }
}

}  // namespace
}  // namespace pst::testing
