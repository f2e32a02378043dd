// The table of per-role tokens: what parses, what each token speaks for,
// and the errors that name the line. security_integration_test checks the
// tokens through real daemons.
#include "common/role_tokens.h"

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pst::common {
namespace {

std::string HexDigest(absl::string_view token) { return absl::BytesToHexString(Sha256(token)); }

TEST(RoleTokensTest, Sha256_IsTheStandardDigest) {
  // FIPS 180-2's example "abc".
  EXPECT_EQ(HexDigest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(RoleTokensTest, Table_EachTokenSpeaksForItsTasks_OthersForNone) {
  const std::string text =
      absl::StrCat("# digest  task(s)\n", "\n", HexDigest("ps-secret"), " ps-0.pstrain\n", "  ",
                   absl::AsciiStrToUpper(HexDigest("w0-secret")),
                   "\tworker-0.pstrain  chief-0.pstrain # worker 0 acts as a chief too\r\n",
                   HexDigest("w1-secret"), " worker-1.pstrain");
  absl::StatusOr<RoleTokens> table = RoleTokens::Parse(text);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 3u);
  const std::vector<TaskIdentity>& ps = table->TasksOf("ps-secret");
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(TaskName(ps[0]), "ps-0.pstrain");
  const std::vector<TaskIdentity>& w0 = table->TasksOf("w0-secret");
  ASSERT_EQ(w0.size(), 2u);
  EXPECT_EQ(TaskName(w0[0]), "worker-0.pstrain");
  EXPECT_EQ(TaskName(w0[1]), "chief-0.pstrain");
  EXPECT_EQ(TaskName(table->TasksOf("w1-secret").at(0)), "worker-1.pstrain");
  for (const char* other : {"", "w1-secret ", "W1-SECRET", "ps-0.pstrain"}) {
    EXPECT_TRUE(table->TasksOf(other).empty()) << other;
  }
  // The digest itself is not a token.
  EXPECT_TRUE(table->TasksOf(HexDigest("ps-secret")).empty());
}

TEST(RoleTokensTest, BadTables_NameTheLineAndTheProblem) {
  const std::string a = HexDigest("a");
  const std::string b = HexDigest("b");
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {"", "lists no token"},
      {"# only a comment\n\n", "lists no token"},
      {"abc worker-0.pstrain", "line 1: 'abc' is not a SHA-256 digest"},
      {absl::StrCat("\n", a.substr(0, 63), "g worker-0.pstrain"), "line 2: '"},
      {a, "line 1: a token needs the task it speaks for"},
      {absl::StrCat(a, " worker-0"), "line 1: 'worker-0' is not a task name"},
      {absl::StrCat(a, " worker-01.pstrain"), "'worker-01.pstrain' is not a task name"},
      {absl::StrCat(a, " ps-0.pstrain\n", a, " ps-1.pstrain"),
       "line 2: this digest is listed twice"},
      {absl::StrCat(a, " ps-0.pstrain\n", b, " ps-0.pstrain"),
       "line 2: ps-0.pstrain has a token on line 1 already"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RoleTokens> table = RoleTokens::Parse(c.text);
    EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(absl::StrContains(table.status().message(), c.message)) << c.text << "\n"
                                                                        << table.status();
  }
}

}  // namespace
}  // namespace pst::common
