// The unknown-flag check of ParseCommandLineOrExit, over flags of its own.
#include "flags/command_line.h"

#include <gtest/gtest.h>

#include "absl/flags/flag.h"

ABSL_FLAG(int32_t, epochs, 3, "test flag");
ABSL_FLAG(int32_t, workers, 2, "test flag");
ABSL_FLAG(std::string, checkpoint_dir, "", "test flag");
ABSL_FLAG(bool, overlap, false, "test flag");

namespace pst::flags {
namespace {

TEST(ScanCommandLineTest, KnownFlagsInEveryForm_AreNotUnknown) {
  const ScannedCommandLine scanned =
      ScanCommandLine({"local", "--epochs=3", "-workers=2", "--checkpoint_dir", "/tmp/c",
                       "--overlap", "--nooverlap", "--overlap=false", "--helpfull", "extra"});
  EXPECT_TRUE(scanned.unknown.empty()) << ::testing::PrintToString(scanned.unknown);
  // "/tmp/c" is --checkpoint_dir's value, not a positional argument.
  EXPECT_EQ(scanned.positional, (std::vector<std::string>{"local", "extra"}));
  EXPECT_FALSE(scanned.help);
}

TEST(ScanCommandLineTest, Misspelt_AreUnknown_WithoutDashesOrValue) {
  const ScannedCommandLine scanned = ScanCommandLine(
      {"local", "--epoch=3", "--worker", "2", "-checkpointdir=/tmp/c", "--noepochs"});
  // --noepochs: "no" negates bools only.
  EXPECT_EQ(scanned.unknown,
            (std::vector<std::string>{"epoch", "worker", "checkpointdir", "noepochs"}));
}

TEST(ScanCommandLineTest, AfterDoubleDash_EverythingIsPositional) {
  const ScannedCommandLine scanned = ScanCommandLine({"--epochs=1", "--", "--epoch", "x"});
  EXPECT_TRUE(scanned.unknown.empty());
  EXPECT_EQ(scanned.positional, (std::vector<std::string>{"--epoch", "x"}));
}

TEST(ScanCommandLineTest, Undefok_NamesAreNotUnknown) {
  const ScannedCommandLine scanned =
      ScanCommandLine({"--undefok=epoch,verbose", "--epoch=3", "--noverbose", "--other"});
  EXPECT_EQ(scanned.unknown, std::vector<std::string>{"other"});
}

TEST(ScanCommandLineTest, Help_IsNoticed) {
  EXPECT_TRUE(ScanCommandLine({"tfconfig", "--help"}).help);
  EXPECT_TRUE(ScanCommandLine({"-helpshort"}).help);
  EXPECT_FALSE(ScanCommandLine({"--helpfull"}).help);
}

TEST(UnknownFlagMessageTest, NamesTheClosestFlag) {
  EXPECT_EQ(UnknownFlagMessage("epoch"), "unknown flag --epoch (did you mean --epochs?)");
  EXPECT_EQ(UnknownFlagMessage("worker"), "unknown flag --worker (did you mean --workers?)");
  EXPECT_EQ(UnknownFlagMessage("checkpointdir"),
            "unknown flag --checkpointdir (did you mean --checkpoint_dir?)");
  EXPECT_EQ(UnknownFlagMessage("Epochs"), "unknown flag --Epochs (did you mean --epochs?)");
  EXPECT_EQ(UnknownFlagMessage("hlep"), "unknown flag --hlep (did you mean --help?)");
}

TEST(UnknownFlagMessageTest, FarFromEveryFlag_SuggestsNothing) {
  EXPECT_EQ(UnknownFlagMessage("learning_schedule"), "unknown flag --learning_schedule");
}

void ParseMisspelt() {
  char arg0[] = "prog";
  char arg1[] = "--epoch=3";
  char* argv[] = {arg0, arg1};
  ParseCommandLineOrExit(2, argv);
}

TEST(ParseCommandLineOrExitTest, UnknownFlag_ExitsTwoWithTheSuggestion) {
  EXPECT_EXIT(ParseMisspelt(), ::testing::ExitedWithCode(2),
              "ERROR: unknown flag --epoch \\(did you mean --epochs\\?\\)");
}

void ParseHelp() {
  char arg0[] = "prog";
  char arg1[] = "sub";
  char arg2[] = "--help";
  char* argv[] = {arg0, arg1, arg2};
  ParseCommandLineOrExit(3, argv, [](const std::vector<std::string>& positional) {
    std::fprintf(stderr, "help for %s\n", positional.at(1).c_str());
    return true;
  });
}

TEST(ParseCommandLineOrExitTest, Help_CallsThePrinter_AndExitsZero) {
  EXPECT_EXIT(ParseHelp(), ::testing::ExitedWithCode(0), "help for sub");
}

TEST(ParseCommandLineOrExitTest, KnownFlags_AreParsed_AndPositionalReturned) {
  char arg0[] = "prog";
  char arg1[] = "local";
  char arg2[] = "--epochs=7";
  char* argv[] = {arg0, arg1, arg2};
  const std::vector<char*> positional = ParseCommandLineOrExit(3, argv);
  ASSERT_EQ(positional.size(), 2u);
  EXPECT_STREQ(positional[1], "local");
  EXPECT_EQ(absl::GetFlag(FLAGS_epochs), 7);
}

}  // namespace
}  // namespace pst::flags
