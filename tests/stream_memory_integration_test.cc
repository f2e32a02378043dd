// --stream_data keeps a worker's memory flat in its input's size: real
// daemons (pstrain local, one ps, one worker) train wide_deep for a whole
// epoch of a Criteo file and of one four times its size, streamed and
// loaded whole. Each worker logs its peak resident memory (VmHWM) as it
// finishes. Streamed, the larger file costs the worker no more than a few
// MB; loaded, it costs about its parsed size: the control that shows the
// figure sees data held in memory.
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

// The worker's peak resident memory in MB after one epoch of `data`; -1 if
// the job failed or did not say.
double WorkerPeakMb(const std::string& data, const std::string& eval, bool stream) {
  std::vector<std::string> flags = {"--model=wide_deep", "--data=" + data, "--eval_data=" + eval,
                                    "--ps=1",           "--workers=1",     "--epochs=1",
                                    "--batch_size=256"};
  if (stream) flags.push_back("--stream_data");
  std::unique_ptr<TestProcess> launcher = LaunchLocal(flags);
  EXPECT_NE(launcher, nullptr);
  if (launcher == nullptr) return -1;
  const std::optional<int> exited = launcher->WaitForExit(absl::Seconds(200));
  EXPECT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(exited.has_value() ? ExitCode(*exited) : -1, 0) << launcher->output();
  std::smatch m;
  const std::string output = launcher->output();
  if (!std::regex_search(output, m,
                         std::regex(R"(worker:0\] worker finished: .*peak resident memory ([0-9.]+) MB)"))) {
    ADD_FAILURE() << "no peak memory line in\n" << output;
    return -1;
  }
  return std::stod(m[1]);
}

TEST(StreamMemoryTest, WorkerPeakMemory_FlatInTheInputsSize_WhenStreamed) {
  const std::string dir = TestDir();
  const std::string small = Generate(dir, "small.tsv", kSmallRows, 1);
  const std::string large = Generate(dir, "large.tsv", kLargeRows, 2);
  const std::string eval = Generate(dir, "eval.tsv", 2000, 3);
  const double streamed_small = WorkerPeakMb(small, eval, true);
  const double streamed_large = WorkerPeakMb(large, eval, true);
  const double loaded_small = WorkerPeakMb(small, eval, false);
  const double loaded_large = WorkerPeakMb(large, eval, false);
  std::printf("worker peak MB: streamed %.1f -> %.1f, loaded %.1f -> %.1f (%lld -> %lld rows)\n",
              streamed_small, streamed_large, loaded_small, loaded_large,
              static_cast<long long>(kSmallRows), static_cast<long long>(kLargeRows));
  ASSERT_GT(streamed_small, 0);
  ASSERT_GT(loaded_small, 0);
  // 120,000 more rows: about 32 MB parsed.
  EXPECT_LT(streamed_large - streamed_small, 8.0);
  EXPECT_GT(loaded_large - loaded_small, 25.0);
}

}  // namespace
}  // namespace pst::testing
