// A misspelt flag, given to the real binaries: each refuses it in one line
// that names the closest real flag, and exits 2 before doing anything.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

Outcome RunBinary(std::vector<std::string> argv) { return RunToExit(std::move(argv)); }

TEST(UnknownFlagTest, Pstrain_SuggestsTheClosestFlag_InEverySubcommand) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const Case cases[] = {
      {{"local", "--epoch=3"}, "ERROR: unknown flag --epoch (did you mean --epochs?)"},
      {{"local", "--worker=2"}, "ERROR: unknown flag --worker (did you mean --workers?)"},
      {{"local", "--checkpointdir=/tmp/c"},
       "ERROR: unknown flag --checkpointdir (did you mean --checkpoint_dir?)"},
      {{"tfconfig", "--ps_host=h1"}, "ERROR: unknown flag --ps_host (did you mean --ps_hosts?)"},
      {{"health", "localhost:2222", "--timeout=1"},
       "ERROR: unknown flag --timeout (did you mean --timeout_s?)"},
      {{"checkpoint", "inspect", "/tmp", "--include_slot"},
       "ERROR: unknown flag --include_slot (did you mean --include_slots?)"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BinaryPath("pstrain")};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const Outcome run = RunBinary(argv);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find(c.says), std::string::npos) << run.output;
    // One line, and nothing started.
    EXPECT_EQ(run.output, std::string(c.says) + "\n");
  }
}

TEST(UnknownFlagTest, Daemons_SuggestTheClosestFlag) {
  struct Case {
    const char* binary;
    const char* flag;
    const char* says;
  };
  const Case cases[] = {
      {"worker", "--epoch=3", "ERROR: unknown flag --epoch (did you mean --epochs?)"},
      {"ps_server", "--checkpointdir=/tmp/c",
       "ERROR: unknown flag --checkpointdir (did you mean --checkpoint_dir?)"},
      {"chief", "--batchsize=3", "ERROR: unknown flag --batchsize (did you mean --batch_size?)"},
      {"evaluator", "--best_metrics=auc",
       "ERROR: unknown flag --best_metrics (did you mean --best_metric?)"},
      {"ps_bench", "--size=1M", "ERROR: unknown flag --size (did you mean --sizes?)"},
  };
  for (const Case& c : cases) {
    const Outcome run = RunBinary({BinaryPath(c.binary), c.flag});
    EXPECT_EQ(run.exit_code, 2) << c.binary << ": " << run.output;
    EXPECT_EQ(run.output, std::string(c.says) + "\n") << c.binary;
  }
}

TEST(UnknownFlagTest, FarFromEveryFlag_NoSuggestion) {
  const Outcome run = RunBinary({BinaryPath("pstrain"), "local", "--frobnicate"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(run.output, "ERROR: unknown flag --frobnicate\n");
}

TEST(UnknownFlagTest, HelpAndHelpfull_StillWork) {
  Outcome run = RunBinary({BinaryPath("worker"), "--helpfull"});
  EXPECT_EQ(run.exit_code, 1) << "Abseil's usage flags exit 1";
  EXPECT_NE(run.output.find("--step_delay_ms"), std::string::npos) << run.output;
  run = RunBinary({BinaryPath("ps_server"), "--help"});
  EXPECT_NE(run.output.find("pstrain parameter server"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace pst::testing
