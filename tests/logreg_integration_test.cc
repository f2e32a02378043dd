// --model=logreg end to end: real daemons via pstrain local on generated
// libsvm data, against the generator's best achievable AUC and against
// pstrain reference (one process) on the same file.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

class LogregClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/logreg_it_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  struct Result {
    int exit_code = -1;
    std::string output;
    nlohmann::json summary;
  };
  // Runs `pstrain <args>` with TMPDIR in this test's directory (so
  // --data=generate writes a fresh file there).
  Result Run(std::vector<std::string> args, const std::string& name) {
    const std::string summary = absl::StrCat(dir_, "/", name, ".json");
    std::vector<std::string> argv = {BinaryPath("pstrain")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--summary_json=" + summary);
    Result result;
    auto process = TestProcess::Start(argv, {"TMPDIR=" + dir_});
    EXPECT_TRUE(process.ok());
    if (!process.ok()) return result;
    std::optional<int> exited = (*process)->WaitForExit(absl::Seconds(240));
    EXPECT_TRUE(exited.has_value()) << (*process)->output();
    result.exit_code = exited.has_value() ? ExitCode(*exited) : -1;
    result.output = (*process)->output();
    std::ifstream in(summary);
    result.summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    return result;
  }

  // The lines of a file, without their '\n'.
  static std::vector<std::string> ReadLines(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  // Writes lines [begin, end) to `path`, gzip-compressed when it ends in .gz.
  static void WriteLines(const std::string& path, const std::vector<std::string>& lines,
                         size_t begin, size_t end) {
    std::string text;
    for (size_t i = begin; i < end; ++i) absl::StrAppend(&text, lines[i], "\n");
    if (path.ends_with(".gz")) {
      gzFile gz = gzopen(path.c_str(), "wb");
      ASSERT_NE(gz, nullptr);
      ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
                static_cast<int>(text.size()));
      ASSERT_EQ(gzclose(gz), Z_OK);
    } else {
      std::ofstream(path) << text;
    }
  }

  std::string dir_;
};

TEST_F(LogregClusterTest, GeneratedData_ClusterReachesTheBestAucWithin001_AndTheReference) {
  const Result cluster =
      Run({"local", "--model=logreg", "--data=generate:rows=200000,seed=5", "--ps=2", "--workers=2",
           "--heartbeat_ms=200", "--log_every_s=1", "--timeout_s=240"},
          "cluster");
  ASSERT_EQ(cluster.exit_code, 0) << cluster.output;
  // "pstrain: generated PATH: N rows, P% positive, best achievable AUC A (B on the last 10%)"
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      cluster.output, m,
      std::regex(
          R"(generated (\S+): 200000 rows, .* best achievable AUC ([0-9.]+) \(([0-9.]+) on the last 10%\))")))
      << cluster.output;
  const std::string data = m[1];
  const double best_held_out = std::stod(m[3]);
  ASSERT_TRUE(cluster.summary.contains("test_auc")) << cluster.summary.dump();
  EXPECT_EQ(cluster.summary["test_examples"].get<int64_t>(), 20000);
  // Rows of the hash table were created on both ps, and no more than the
  // generator's 1000 distinct features.
  const auto rows = cluster.summary["hash_rows_per_ps"].get<std::vector<int64_t>>();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_GT(rows[0], 0);
  EXPECT_GT(rows[1], 0);
  EXPECT_LE(rows[0] + rows[1], 1000);

  const Result single = Run({"reference", "--model=logreg", "--data=" + data, "--ps=2"}, "single");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const double a = cluster.summary["test_auc"].get<double>();
  const double b = single.summary["test_auc"].get<double>();
  std::printf("best achievable AUC %.4f, cluster %.4f, single process %.4f\n", best_held_out, a, b);
  EXPECT_NEAR(a, best_held_out, 0.01);
  EXPECT_NEAR(a, b, 0.005);
  EXPECT_LE(a, best_held_out + 0.005);  // not above what the data allows
}

TEST_F(LogregClusterTest, BucketedTableInSsp_TrainsNearTheBestAuc) {
  const std::string data = dir_ + "/data.svm";
  const Result gen = Run({"generate_libsvm", "--out=" + data, "--rows=100000", "--seed=9"}, "gen");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const nlohmann::json stats = nlohmann::json::parse(gen.output.substr(gen.output.find('{')));
  const Result cluster =
      Run({"local", "--model=logreg", "--data=" + data, "--buckets=65536", "--mode=ssp", "--ps=2",
           "--workers=2", "--heartbeat_ms=200", "--log_every_s=1", "--timeout_s=240"},
          "cluster");
  ASSERT_EQ(cluster.exit_code, 0) << cluster.output;
  EXPECT_NEAR(cluster.summary["test_auc"].get<double>(), stats["best_auc_held_out"].get<double>(),
              0.015)
      << cluster.summary.dump();
  // A bounded table: no hash rows, so no figure of them.
  EXPECT_FALSE(cluster.summary.contains("hash_rows_per_ps")) << cluster.summary.dump();
}

// --mode=sync with the hash table: real daemons, 2 workers whose row
// pushes of each step are summed per id on the ps and applied once. The
// job ends at the expected step with every table partition in step.
TEST_F(LogregClusterTest, SyncModeWithAHashTable_TrainsNearTheBestAuc) {
  const std::string data = dir_ + "/data.svm";
  const Result gen = Run({"generate_libsvm", "--out=" + data, "--rows=20000", "--seed=4"}, "gen");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const nlohmann::json stats = nlohmann::json::parse(gen.output.substr(gen.output.find('{')));
  const Result cluster =
      Run({"local", "--model=logreg", "--data=" + data, "--buckets=0", "--mode=sync", "--ps=2",
           "--workers=2", "--batch_size=256", "--epochs=2", "--heartbeat_ms=200",
           "--log_every_s=1", "--timeout_s=240"},
          "cluster");
  ASSERT_EQ(cluster.exit_code, 0) << cluster.output;
  // 18000 training examples, 9000 per worker: 36 batches an epoch each,
  // one step per pair of batches.
  EXPECT_EQ(cluster.summary["global_step"].get<int64_t>(), 72) << cluster.summary.dump();
  EXPECT_EQ(cluster.summary["pushes"].get<int64_t>(), 144) << cluster.summary.dump();
  const auto rows = cluster.summary["hash_rows_per_ps"].get<std::vector<int64_t>>();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_GT(rows[0], 0);
  EXPECT_GT(rows[1], 0);
  // The mean of 2 workers' summed gradients: half the step of one process
  // on the combined batch's sum, so 72 steps land a little below the best.
  EXPECT_NEAR(cluster.summary["test_auc"].get<double>(), stats["best_auc_held_out"].get<double>(),
              0.06)
      << cluster.summary.dump();
  EXPECT_GT(cluster.summary["test_auc"].get<double>(), 0.68) << cluster.summary.dump();
}

// --stream_data: a directory of plain and gzip files, every worker reading
// its share (here every other file) as a shuffled stream, and the held-out
// set streamed from --eval_data by the chief.
TEST_F(LogregClusterTest, StreamedDirectory_TwoWorkersTrainNearTheBestAuc) {
  const std::string all = dir_ + "/all.svm";
  const Result gen = Run({"generate_libsvm", "--out=" + all, "--rows=40000", "--seed=6"}, "gen");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const nlohmann::json stats = nlohmann::json::parse(gen.output.substr(gen.output.find('{')));
  const std::vector<std::string> lines = ReadLines(all);
  ASSERT_EQ(lines.size(), 40000u);
  std::filesystem::create_directories(dir_ + "/train");
  auto write = [&](const std::string& path, size_t begin, size_t end) {
    WriteLines(path, lines, begin, end);
  };
  // Files 0 and 2 for worker 0, 1 and 3 for worker 1; the generator's
  // held-out tail (its last 10%) in a file of its own.
  write(dir_ + "/train/part-0.svm.gz", 0, 9000);
  write(dir_ + "/train/part-1.svm", 9000, 18000);
  write(dir_ + "/train/part-2.svm", 18000, 27000);
  write(dir_ + "/train/part-3.svm.gz", 27000, 36000);
  write(dir_ + "/eval.svm", 36000, 40000);
  const Result cluster =
      Run({"local", "--model=logreg", "--stream_data", "--data=" + dir_ + "/train",
           "--eval_data=" + dir_ + "/eval.svm", "--shuffle_buffer=2000", "--ps=2", "--workers=2",
           "--heartbeat_ms=200", "--log_every_s=1", "--timeout_s=240"},
          "cluster");
  ASSERT_EQ(cluster.exit_code, 0) << cluster.output;
  EXPECT_NE(cluster.output.find("worker:0] training on 18000 example(s)"), std::string::npos)
      << cluster.output;
  EXPECT_NE(cluster.output.find("worker:1] training on 18000 example(s)"), std::string::npos)
      << cluster.output;
  EXPECT_EQ(cluster.summary["test_examples"].get<int64_t>(), 4000) << cluster.summary.dump();
  EXPECT_NEAR(cluster.summary["test_auc"].get<double>(), stats["best_auc_held_out"].get<double>(),
              0.015)
      << cluster.summary.dump();

  // A stream has no tail to hold out: --eval_data is required.
  const Result no_eval = Run({"local", "--model=logreg", "--stream_data",
                              "--data=" + dir_ + "/train", "--timeout_s=60"},
                             "no_eval");
  EXPECT_NE(no_eval.exit_code, 0);
  EXPECT_NE(no_eval.output.find("--stream_data needs --eval_data"), std::string::npos)
      << no_eval.output;
}

// Exact positions through a restore: a streamed sync job (a directory of
// plain and gzip files, two workers, their shares shuffled in blocks) whose
// ps:1 is killed after a checkpoint. The ps are restored from it, the
// workers rewind to its data positions and reopen their streams there: the
// job ends bit for bit as the same job without the fault. A worker that
// resumed one example off would change every later step.
TEST_F(LogregClusterTest, StreamedSyncJob_PsKilledAndRestored_EndsBitForBitAsWithoutTheFault) {
  const std::string all = dir_ + "/all.svm";
  const Result gen = Run({"generate_libsvm", "--out=" + all, "--rows=24000", "--seed=8"}, "gen");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const std::vector<std::string> lines = ReadLines(all);
  ASSERT_EQ(lines.size(), 24000u);
  std::filesystem::create_directories(dir_ + "/train");
  auto write = [&](const std::string& path, size_t begin, size_t end) {
    WriteLines(path, lines, begin, end);
  };
  write(dir_ + "/train/part-0.svm.gz", 0, 5000);
  write(dir_ + "/train/part-1.svm", 5000, 10000);
  write(dir_ + "/train/part-2.svm", 10000, 15000);
  write(dir_ + "/train/part-3.svm.gz", 15000, 20000);
  write(dir_ + "/eval.svm", 20000, 24000);
  // 10,000 examples a worker, 40 batches of 250 an epoch, 2 epochs: 80
  // steps, a checkpoint every 20; worker 0 sleeps 40 ms a step (the other
  // waits for it: sync), so the kill lands mid-job.
  auto flags = [&](const std::string& name) {
    return std::vector<std::string>{
        "--model=logreg", "--stream_data", "--data=" + dir_ + "/train",
        "--eval_data=" + dir_ + "/eval.svm", "--shuffle_buffer=700", "--mode=sync",
        "--ps=2", "--workers=2", "--epochs=2", "--batch_size=250", "--seed=5",
        "--checkpoint_dir=" + dir_ + "/" + name, "--save_checkpoints_steps=20",
        "--slow_worker=0", "--slow_worker_delay_ms=40", "--restart_failed",
        "--peer_timeout_s=5", "--recovery_timeout_s=60", "--heartbeat_ms=200"};
  };
  std::vector<std::string> local = flags("clean");
  local.insert(local.begin(), "local");
  const Result clean = Run(local, "clean");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  const nlohmann::json& baseline = clean.summary;
  ASSERT_TRUE(baseline.is_object()) << clean.output;
  EXPECT_EQ(baseline["global_step"], 80) << baseline.dump();

  std::vector<std::string> faulted_flags = flags("faulted");
  faulted_flags.push_back("--summary_json=" + dir_ + "/faulted.json");
  std::unique_ptr<TestProcess> launcher = LaunchLocal(faulted_flags);
  ASSERT_NE(launcher, nullptr);
  ASSERT_TRUE(launcher->WaitForOutput("saved checkpoint", absl::Seconds(120)))
      << launcher->output();
  const std::map<std::string, pid_t> pids = DaemonPids(launcher->output());
  ASSERT_EQ(pids.count("ps:1"), 1u) << launcher->output();
  ASSERT_EQ(kill(pids.at("ps:1"), SIGKILL), 0);
  const std::optional<int> exited = launcher->WaitForExit(absl::Seconds(240));
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  ASSERT_EQ(ExitCode(*exited), 0) << launcher->output();
  const nlohmann::json faulted = ReadJsonFile(dir_ + "/faulted.json");
  ASSERT_TRUE(faulted.is_object()) << launcher->output();
  // The kill cost a restore (not nothing), and the job still ends as the
  // fault-free one, to the last bit of its held-out figures.
  ASSERT_EQ(faulted["recoveries"].size(), 1u) << faulted.dump();
  EXPECT_EQ(faulted["global_step"], baseline["global_step"]) << faulted.dump();
  EXPECT_EQ(faulted["test_examples"], 4000) << faulted.dump();
  EXPECT_EQ(faulted["test_logloss"].get<double>(), baseline["test_logloss"].get<double>())
      << faulted.dump() << "\nfault-free: " << baseline.dump();
  EXPECT_EQ(faulted["test_auc"].get<double>(), baseline["test_auc"].get<double>());
}

TEST_F(LogregClusterTest, MalformedData_ExitsNonzeroNamingTheLine) {
  const std::string data = dir_ + "/bad.svm";
  std::ofstream(data) << "1 3:1 4:1\n0 3:1\n1 4:oops\n";
  const Result r = Run({"reference", "--model=logreg", "--data=" + data}, "bad");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.svm:3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("oops"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace pst::testing
