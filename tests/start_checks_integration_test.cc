// Settings that cannot work are refused before anything starts: `pstrain
// local` and each daemon check the flags (flags/start_checks.h) first, and
// say in one line which flag and what to do. A job that fails after
// start-up anyway ends with the launcher repeating the error that caused it.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/tf_config.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

// `pstrain local` with `flags`, the way the other launcher tests run it.
Outcome Local(const std::vector<std::string>& flags) {
  const absl::Time start = absl::Now();
  std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
  if (launcher == nullptr) return {};
  return Finish(std::move(launcher), start, absl::Seconds(240));
}

// Whether this machine shows a worker no GPU.
bool NoGpuVisible() {
  const absl::Time start = absl::Now();
  return Finish(TestProcess::Start({BinaryPath("pstrain"), "devices", "--device=gpu"}), start,
                absl::Seconds(60))
             .exit_code == 1;
}

// The launcher's refusal: nonzero, one line naming the flag, fast, and no
// daemon started.
void ExpectRefusedBeforeStart(const Outcome& run, const std::string& says) {
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output.find("started "), std::string::npos) << run.output;
  EXPECT_TRUE(DaemonPids(run.output).empty()) << run.output;
  EXPECT_LT(run.took, absl::Seconds(20)) << run.output;
  const std::vector<std::string> lines = absl::StrSplit(run.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << run.output;
  EXPECT_EQ(lines[0].rfind("pstrain local: ", 0), 0u) << run.output;
  EXPECT_NE(lines[0].find(says), std::string::npos) << run.output;
}

TEST(LocalStartChecksTest, ModelThatReadsData_WithoutData_IsRefused_NamingGenerate) {
  ExpectRefusedBeforeStart(Local({"--model=wide_deep"}),
                           "--model=wide_deep needs --data: a file every task can read, or "
                           "--data=generate[:rows=N]");
}

TEST(LocalStartChecksTest, DataFileThatDoesNotExist_IsRefused) {
  const std::string missing = TestDir() + "/no_such.svm";
  ExpectRefusedBeforeStart(Local({"--model=logreg", "--data=" + missing}),
                           "--data=" + missing + ": no such file");
}

TEST(LocalStartChecksTest, StreamedDataOrEvalDataThatDoesNotExist_IsRefusedNamingIt) {
  const std::string dir = TestDir();
  std::ofstream(dir + "/eval.svm") << "1 3:1\n";
  ExpectRefusedBeforeStart(Local({"--model=logreg", "--stream_data", "--data=" + dir + "/parts-*",
                                  "--eval_data=" + dir + "/eval.svm"}),
                           "--data: no input file matches " + dir + "/parts-*");
  ExpectRefusedBeforeStart(Local({"--model=logreg", "--data=" + dir + "/eval.svm",
                                  "--eval_data=" + dir + "/no_such.svm"}),
                           "--eval_data: ");
  // A directory is an input only for a stream.
  ExpectRefusedBeforeStart(Local({"--model=logreg", "--data=" + dir}),
                           "is a directory; --data names one file (--stream_data reads");
}

TEST(LocalStartChecksTest, EvaluatorWithoutCheckpointDir_IsRefused) {
  ExpectRefusedBeforeStart(Local({"--ps=1", "--workers=1", "--evaluator"}),
                           "an evaluator needs --checkpoint_dir");
}

TEST(LocalStartChecksTest, MoreReplicasThanPs_IsRefused) {
  ExpectRefusedBeforeStart(Local({"--ps=1", "--ps_replicas=2"}),
                           "--ps_replicas=2 keeps each shard's backup on another ps, and the "
                           "cluster has 1 ps: give it at least 2 ps");
}

TEST(LocalStartChecksTest, MoreReplicasToAggregateThanWorkers_IsRefused) {
  ExpectRefusedBeforeStart(
      Local({"--workers=2", "--mode=sync", "--replicas_to_aggregate=3"}),
      "--replicas_to_aggregate=3 exceeds the 2 worker(s) of the cluster: give at most 2");
}

TEST(LocalStartChecksTest, NegativeOrDirlessSaveCadence_IsRefusedNamingTheFlag) {
  ExpectRefusedBeforeStart(Local({"--checkpoint_dir=" + TestDir(), "--incremental_save_steps=-5"}),
                           "--incremental_save_steps=-5 is negative");
  ExpectRefusedBeforeStart(Local({"--incremental_save_secs=30"}),
                           "--incremental_save_steps/_secs save checkpoints: give "
                           "--checkpoint_dir too");
}

TEST(LocalStartChecksTest, BadOptimizerScheduleOrClipping_IsRefusedNamingTheFlag) {
  ExpectRefusedBeforeStart(Local({"--optimizer=lamb"}), "unknown optimizer 'lamb' (known: sgd,");
  ExpectRefusedBeforeStart(Local({"--optimizer_form=keras"}), "unknown optimizer form 'keras'");
  ExpectRefusedBeforeStart(Local({"--learning_rate=-0.1"}),
                           "learning_rate must be positive and finite, got -0.1");
  ExpectRefusedBeforeStart(Local({"--optimizer=rmsprop", "--rho=1.5"}),
                           "rmsprop rho must be in (0, 1)");
  ExpectRefusedBeforeStart(Local({"--lr_schedule=triangle:5"}),
                           "--lr_schedule: unknown item 'triangle'");
  ExpectRefusedBeforeStart(Local({"--lr_schedule=cosine:1000,gamma:0.5"}),
                           "--lr_schedule: 'gamma' does not apply to cosine");
  ExpectRefusedBeforeStart(Local({"--clip_norm=-1"}), "--clip_norm must be >= 0");
  ExpectRefusedBeforeStart(Local({"--weight_decay=0.1", "--optimizer=ftrl"}),
                           "weight_decay does not apply to ftrl");
}

TEST(LocalStartChecksTest, OptimizerGroupMatchingNothingOrAVariableTwice_IsRefused) {
  ExpectRefusedBeforeStart(Local({"--table_optimizer=adagrad"}),  // mlp: no tables
                           "--table_optimizer: optimizer group 0 (tables): 'tables' matches no "
                           "variable of the model");
  const std::string spec = TestDir() + "/groups.json";
  std::ofstream(spec) << R"({"format": "pstrain.model_spec/1",
    "variables": [{"name": "ab", "shape": [2], "kind": "dense", "init": {"kind": "zeros"}},
                  {"name": "c", "shape": [2], "kind": "dense", "init": {"kind": "zeros"}}],
    "optimizer_groups": [
      {"match": ["a*"], "optimizer": {"name": "sgd", "learning_rate": 0.1}},
      {"match": ["ab", "c"], "optimizer": {"name": "adagrad", "learning_rate": 0.1}}]})";
  ExpectRefusedBeforeStart(Local({"--model=spec:" + spec, "--worker_command=true"}),
                           "variable 'ab' is in optimizer group 0 (a*) and in optimizer group 1 "
                           "(ab, c): a variable has one optimizer");
}

TEST(LocalStartChecksTest, GpuWithoutGpu_IsRefused) {
  if (!NoGpuVisible()) GTEST_SKIP() << "this machine has a GPU";
  ExpectRefusedBeforeStart(Local({"--device=gpu"}), "--device=gpu, but no GPU is visible");
}

// A daemon started by hand checks the same, for the flags it reads: one
// line "<binary>: <what>", status 2, before it waits for any peer.
Outcome Daemon(const std::string& binary, const std::string& type,
               const std::vector<std::string>& flags, bool with_evaluator = false) {
  const LocalSpec spec = PickLocalSpec(1, 1, 1);
  common::TfConfig config;
  config.cluster.chief = spec.chief;
  config.cluster.ps = spec.ps;
  config.cluster.worker = spec.worker;
  if (with_evaluator) config.cluster.evaluator = {"127.0.0.1:1"};
  config.task = {common::ParseTaskType(type).value(), 0};
  const std::string tf = common::TfConfigToJson(config);
  std::vector<std::string> argv = {BinaryPath(binary), "--tf_config=" + tf, "--startup_timeout_s=5",
                                   "--chief_timeout_s=5"};
  if (binary != "ps_server") argv.pop_back();  // --chief_timeout_s is the ps's
  argv.insert(argv.end(), flags.begin(), flags.end());
  const absl::Time start = absl::Now();
  return Finish(TestProcess::Start(argv), start, absl::Seconds(60));
}

void ExpectDaemonRefused(const Outcome& run, const std::string& binary, const std::string& says) {
  SCOPED_TRACE(binary);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output.rfind(binary + ": ", 0), 0u) << run.output;
  EXPECT_NE(run.output.find(says), std::string::npos) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
}

TEST(DaemonStartChecksTest, EachDaemon_RefusesWhatItReads) {
  ExpectDaemonRefused(Daemon("ps_server", "ps", {"--ps_replicas=2"}), "ps_server",
                      "--ps_replicas=2 keeps each shard's backup on another ps");
  ExpectDaemonRefused(Daemon("chief", "chief", {"--ps_replicas=2"}), "chief",
                      "--ps_replicas=2 keeps each shard's backup on another ps");
  ExpectDaemonRefused(Daemon("chief", "chief", {}, /*with_evaluator=*/true), "chief",
                      "give the chief --checkpoint_dir");
  ExpectDaemonRefused(Daemon("worker", "worker", {"--model=wide_deep"}), "worker",
                      "--model=wide_deep needs --data: a file this task can read");
  ExpectDaemonRefused(Daemon("worker", "worker", {"--model=logreg", "--data=generate"}), "worker",
                      "--data=generate: only pstrain local generates data sets");
  if (NoGpuVisible()) {
    ExpectDaemonRefused(Daemon("worker", "worker", {"--device=gpu"}), "worker",
                        "--device=gpu, but no GPU is visible");
  }
}

// Malformed data passes every check on flags and fails in the daemons that
// read it: the launcher's last line repeats the first error of the first
// task that failed.
TEST(LocalFailureTest, JobFailedAfterStart_LastLineRepeatsTheFirstError) {
  const std::string data = TestDir() + "/bad.svm";
  std::ofstream(data) << "1 3:0.5\nthis is not libsvm\n";
  const Outcome run = Local({"--ps=1", "--workers=1", "--model=logreg", "--data=" + data});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  std::string last = run.output.substr(0, run.output.find_last_not_of('\n') + 1);
  last = last.substr(last.rfind('\n') + 1);
  std::smatch match;
  ASSERT_TRUE(
      std::regex_match(last, match, std::regex(R"(pstrain local: job failed: (\w+:\d+): (.+))")))
      << run.output;
  // The task's own error line, as it logged it, and about the data.
  const std::string task = match[1], error = match[2];
  EXPECT_NE(run.output.find(" E " + task + "] " + error), std::string::npos) << run.output;
  EXPECT_NE(error.find(data), std::string::npos) << run.output;
}

}  // namespace
}  // namespace pst::testing
