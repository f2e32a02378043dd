// Prometheus metrics through real daemons: a job started with
// `pstrain local --metrics_port=P` has every daemon serve /metrics while it
// trains; each page holds that daemon's figures and passes
// `promtool check metrics` (Debian's prometheus package; that check is
// skipped, and said to be, without it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/metrics_scrape.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

TEST(MetricsTest, EveryDaemonServesItsFigures_AndPromtoolAcceptsThem) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is missing";
  const int base = ConsecutiveFreePorts(3);
  ASSERT_GT(base, 0);
  const std::string dir = TestDir();
  auto launcher = LaunchLocal({"--ps=1", "--workers=1", "--epochs=2",
                               absl::StrCat("--metrics_port=", base),
                               "--checkpoint_dir=" + dir + "/ckpt", "--save_checkpoints_steps=200"});
  ASSERT_NE(launcher, nullptr);
  // Start order: ps:0, chief:0, worker:0.
  ASSERT_TRUE(launcher->WaitForOutput(absl::StrCat("worker:0 metrics at http://127.0.0.1:", base + 2),
                                      absl::Seconds(60)))
      << launcher->output();
  ASSERT_TRUE(launcher->WaitForOutput("saved checkpoint", absl::Seconds(120)))
      << launcher->output();
  struct Page {
    const char* task;
    int port;
    std::vector<const char*> metrics;
  } pages[] = {
      {"ps:0",
       base,
       {"pstrain_ps_pushes_applied_total", "pstrain_ps_gradients_applied_total",
        "pstrain_ps_staleness_sum_total", "pstrain_ps_variables", "pstrain_ps_embedding_rows",
        "pstrain_rpc_requests_total", "pstrain_rpc_duration_seconds_bucket",
        "pstrain_rpc_sent_bytes_total", "pstrain_rpc_received_bytes_total",
        "pstrain_ps_apply_seconds_total"}},
      {"chief:0",
       base + 1,
       {"pstrain_chief_phase{", "pstrain_chief_global_step", "pstrain_chief_live_workers",
        "pstrain_chief_learning_rate", "pstrain_chief_checkpoint_seconds_count",
        "pstrain_chief_recoveries_total", "pstrain_rpc_requests_total"}},
      {"worker:0",
       base + 2,
       {"pstrain_worker_steps_total", "pstrain_worker_examples_total",
        "pstrain_worker_compute_seconds_total", "pstrain_worker_communication_seconds_total",
        "pstrain_worker_sent_bytes_total", "pstrain_worker_received_bytes_total"}},
  };
  const bool have_promtool = std::system("command -v promtool >/dev/null 2>&1") == 0;
  for (const Page& page : pages) {
    SCOPED_TRACE(page.task);
    const std::string text = Scrape(page.port);
    ASSERT_FALSE(text.empty()) << "nothing at port " << page.port;
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("task=\"", page.task, "\"")))
        << text.substr(0, 2000);
    for (const char* metric : page.metrics) {
      EXPECT_TRUE(absl::StrContains(text, metric)) << metric << "\n" << text.substr(0, 3000);
    }
    if (have_promtool) {
      const std::string path = absl::StrCat(dir, "/", page.port, ".prom");
      std::ofstream(path) << text;
      const std::string command = absl::StrCat("promtool check metrics < ", path, " 2>&1");
      FILE* pipe = popen(command.c_str(), "r");
      ASSERT_NE(pipe, nullptr);
      std::string out;
      char buffer[4096];
      size_t n;
      while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
      EXPECT_EQ(pclose(pipe), 0) << out;
    } else {
      std::printf("promtool is missing: the pages' format was not checked\n");
    }
  }
  // The ps counts what the gradients brought in, and the time applying
  // them, on the raw data-plane methods too.
  const std::string ps = Scrape(base);
  double pushed_bytes = 0;
  for (absl::string_view line : absl::StrSplit(ps, '\n')) {
    if (!absl::StartsWith(line, "pstrain_rpc_received_bytes_total{") ||
        !absl::StrContains(line, "ParameterServer/Push")) {
      continue;
    }
    double value = 0;
    ASSERT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) << line;
    pushed_bytes += value;
  }
  // Each push carries the whole model's gradient: over 100 KB.
  EXPECT_GT(pushed_bytes, 1e5) << ps;
  EXPECT_FALSE(absl::StrContains(ps, "pstrain_ps_apply_seconds_total{task=\"ps:0\"} 0\n")) << ps;
  // Training went on under the scrapes: the page's figures are live.
  const std::string worker = Scrape(base + 2);
  EXPECT_FALSE(absl::StrContains(worker, "pstrain_worker_steps_total{task=\"worker:0\"} 0\n"))
      << worker;
  EXPECT_FALSE(absl::StrContains(worker, "pstrain_worker_sent_bytes_total{task=\"worker:0\"} 0\n"))
      << worker;
  EXPECT_FALSE(
      absl::StrContains(worker, "pstrain_worker_received_bytes_total{task=\"worker:0\"} 0\n"))
      << worker;
  std::optional<int> exited = launcher->WaitForExit(absl::Seconds(240));
  ASSERT_TRUE(exited.has_value()) << launcher->output();
  EXPECT_EQ(ExitCode(*exited), 0) << launcher->output();
}

}  // namespace
}  // namespace pst::testing
