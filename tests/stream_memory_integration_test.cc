// --stream_data keeps a worker's memory flat in its input's size: real
// daemons (pstrain local, one ps, one worker) train wide_deep for a whole
// epoch of a Criteo file and of one four times its size, streamed and
// loaded whole. Each worker logs its peak resident memory (VmHWM) as it
// finishes. Streamed, the larger file costs the worker no more than a few
// MB; loaded, it costs about its parsed size: the control that shows the
// figure sees data held in memory. The same for the chief, which streams
// the held-out set (--eval_data) it scores at the end: 4 times the rows
// cost it their scores and labels and the AUC's sort, not the parsed rows.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr int64_t kSmallRows = 40000;
constexpr int64_t kLargeRows = 4 * kSmallRows;  // about 42 MB of text, 42 MB parsed

std::string Generate(const std::string& dir, const std::string& name, int64_t rows, int seed) {
  const std::string path = absl::StrCat(dir, "/", name);
  const Outcome gen =
      RunToExit({BinaryPath("pstrain"), "generate_criteo", "--out=" + path,
                 absl::StrCat("--rows=", rows), "--vocab=10000", absl::StrCat("--seed=", seed)},
                absl::Seconds(120));
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  return path;
}

struct PeakMb {
  double worker = -1;
  double chief = -1;
};

// The peak resident memory in MB of the worker after one epoch of `data`,
// and of the chief that scored `eval` at the end; -1 if the job failed or
// did not say.
PeakMb JobPeakMb(const std::string& data, const std::string& eval, bool stream) {
  std::vector<std::string> flags = {
      "--model=wide_deep", "--data=" + data, "--eval_data=" + eval, "--ps=1",
      "--workers=1",       "--epochs=1",     "--batch_size=256"};
  if (stream) flags.push_back("--stream_data");
  std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
  EXPECT_NE(launcher, nullptr);
  if (launcher == nullptr) return {};
  const std::optional<int> exited = launcher->WaitForExit(absl::Seconds(200));
  EXPECT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << launcher->output();
  const std::string output = launcher->output();
  auto peak = [&](const std::string& line) {
    std::smatch m;
    if (!std::regex_search(output, m,
                           std::regex(line + R"(.*peak resident memory ([0-9.]+) MB)"))) {
      ADD_FAILURE() << "no peak memory line '" << line << "' in\n" << output;
      return -1.0;
    }
    return std::stod(m[1]);
  };
  return {peak(R"(worker:0\] worker finished: )"), peak(R"(chief:0\] chief finished;)")};
}

TEST(StreamMemoryTest, WorkerPeakMemory_FlatInTheInputsSize_WhenStreamed) {
  const std::string dir = TestDir();
  const std::string small = Generate(dir, "small.tsv", kSmallRows, 1);
  const std::string large = Generate(dir, "large.tsv", kLargeRows, 2);
  const std::string eval = Generate(dir, "eval.tsv", 2000, 3);
  const PeakMb streamed_small = JobPeakMb(small, eval, true);
  const PeakMb streamed_large = JobPeakMb(large, eval, true);
  const PeakMb loaded_small = JobPeakMb(small, eval, false);
  const PeakMb loaded_large = JobPeakMb(large, eval, false);
  std::printf("worker peak MB: streamed %.1f -> %.1f, loaded %.1f -> %.1f (%lld -> %lld rows)\n",
              streamed_small.worker, streamed_large.worker, loaded_small.worker,
              loaded_large.worker, static_cast<long long>(kSmallRows),
              static_cast<long long>(kLargeRows));
  ASSERT_GT(streamed_small.worker, 0);
  ASSERT_GT(loaded_small.worker, 0);
  // 120,000 more rows: about 32 MB parsed.
  EXPECT_LT(streamed_large.worker - streamed_small.worker, 8.0);
  EXPECT_GT(loaded_large.worker - loaded_small.worker, 25.0);

  // The chief scoring a held-out file of 40,000 rows, then of 160,000.
  // It keeps each row's score and label, and the AUC sorts them: about 45
  // bytes a row (5.6 MB more here when measured), where the 120,000 more
  // rows parsed would be 32 MB.
  const PeakMb chief_small = JobPeakMb(small, small, true);
  const PeakMb chief_large = JobPeakMb(small, large, true);
  std::printf("chief peak MB scoring %lld -> %lld held-out rows: %.1f -> %.1f\n",
              static_cast<long long>(kSmallRows), static_cast<long long>(kLargeRows),
              chief_small.chief, chief_large.chief);
  ASSERT_GT(chief_small.chief, 0);
  EXPECT_LT(chief_large.chief - chief_small.chief, 16.0);
}

}  // namespace
}  // namespace pst::testing
