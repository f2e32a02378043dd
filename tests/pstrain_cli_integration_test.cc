// The pstrain tool's small subcommands, run as the real binary: mistakes
// are refused at once with what to do, and every subcommand's --help is its
// own.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

Outcome Pstrain(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinaryPath("pstrain")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunToExit(std::move(argv));
}

TEST(PstrainCliTest, Health_AddressWithoutPort_IsRefusedAtOnce) {
  const Outcome run = Pstrain({"health", "localhost"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  // Not the 5 s wait for an answer from nowhere.
  EXPECT_LT(run.took, absl::Seconds(3)) << run.output;
  EXPECT_EQ(run.output,
            "pstrain health: address \"localhost\" has no port; write it as host:port, e.g. "
            "\"localhost:2222\"\n");
}

TEST(PstrainCliTest, CheckpointInspect_MissingFolder_SaysItDoesNotExist) {
  const std::string missing = TestDir() + "/no_such_folder";
  const Outcome run = Pstrain({"checkpoint", "inspect", missing});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output, "pstrain checkpoint inspect: " + missing + " does not exist\n");
}

TEST(PstrainCliTest, CheckpointInspect_EmptyFolder_SaysThereIsNoCheckpoint) {
  const std::string empty = TestDir();
  const Outcome run = Pstrain({"checkpoint", "inspect", empty});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output, "pstrain checkpoint inspect: no checkpoint in " + empty + "\n");
}

TEST(PstrainCliTest, EverySubcommandsHelp_IsItsOwn) {
  struct Case {
    const char* subcommand;
    const char* usage;    // its usage line
    const char* flag;     // one of its flags, listed with its help
    const char* not_its;  // another subcommand's usage line, absent
  };
  const Case cases[] = {
      {"tfconfig", "pstrain tfconfig --ps_hosts=", "--worker_hosts", "pstrain local ["},
      {"local", "pstrain local [--ps=2]", "--restart_failed", "pstrain tfconfig --"},
      {"plan", "pstrain plan", "--placement", "pstrain tfconfig --"},
      {"reference", "pstrain reference", "--model", "pstrain tfconfig --"},
      {"generate_criteo", "pstrain generate_criteo --out=PATH", "--vocab", "pstrain tfconfig --"},
      {"generate_libsvm", "pstrain generate_libsvm --out=PATH", "--features",
       "pstrain tfconfig --"},
      {"checkpoint", "pstrain checkpoint inspect DIR", "--include_slots", "pstrain tfconfig --"},
      {"check", "pstrain check", "--wait_s", "pstrain tfconfig --"},
      {"health", "pstrain health HOST:PORT", "--timeout_s", "pstrain tfconfig --"},
      {"devices", "pstrain devices", "--virtual_devices", "pstrain tfconfig --"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.subcommand);
    // `pstrain help SUBCOMMAND` says the same.
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{c.subcommand, "--help"},
          std::vector<std::string>{"help", c.subcommand}}) {
      const Outcome run = Pstrain(args);
      EXPECT_EQ(run.exit_code, 0) << args[0] << " " << args[1] << ":\n" << run.output;
      EXPECT_NE(run.output.find(c.usage), std::string::npos) << run.output;
      EXPECT_NE(run.output.find(c.flag), std::string::npos) << run.output;
      EXPECT_EQ(run.output.find(c.not_its), std::string::npos) << run.output;
    }
  }
  // Help for a subcommand there is not: the general usage, and exit 2.
  const Outcome unknown = Pstrain({"help", "nope"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("pstrain tfconfig --"), std::string::npos) << unknown.output;
  // And without a subcommand, the general usage lists them all.
  const Outcome run = Pstrain({"help"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const Case& c : cases) EXPECT_NE(run.output.find(c.usage), std::string::npos) << c.usage;
}

}  // namespace
}  // namespace pst::testing
