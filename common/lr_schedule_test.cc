// The learning-rate schedules: each kind's rate at chosen steps, computed
// by hand, the warm-up and `every` clock, the flag syntax and its refusals.
#include "common/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace pst::common {
namespace {

proto::LrSchedule Parse(const std::string& text) {
  absl::StatusOr<proto::LrSchedule> s = ParseLrSchedule(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status();
  return s.ok() ? *s : proto::LrSchedule();
}

// The rate at steps 0..n-1 for base rate 1.
std::vector<double> Rates(const std::string& text, int n) {
  const proto::LrSchedule s = Parse(text);
  std::vector<double> out;
  for (int step = 0; step < n; ++step) out.push_back(LearningRateAt(1.0, s, step));
  return out;
}

void ExpectRates(const std::string& text, const std::vector<double>& want) {
  const std::vector<double> got = Rates(text, static_cast<int>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12) << text << " at step " << i;
  }
}

TEST(LrScheduleTest, EachKind_GivesItsRateByStep) {
  ExpectRates("", {1, 1, 1});
  ExpectRates("constant", {1, 1, 1});
  ExpectRates("step:2,gamma:0.5", {1, 1, 0.5, 0.5, 0.25});
  ExpectRates("multistep:1/3/3,gamma:0.1", {1, 0.1, 0.1, 0.001, 0.001});
  ExpectRates("exponential:0.5", {1, 0.5, 0.25, 0.125});
  // cos(pi * u / 4): 1, 0.7071, 0, -0.7071, -1, then it stays at the floor.
  const double r = std::sqrt(0.5);
  ExpectRates("cosine:4,min:0.2",
              {1, 0.2 + 0.8 * (1 + r) / 2, 0.6, 0.2 + 0.8 * (1 - r) / 2, 0.2, 0.2, 0.2});
  ExpectRates("polynomial:4", {1, 0.75, 0.5, 0.25, 0, 0});
  ExpectRates("polynomial:2,power:2,min:0.1", {1, 0.1 + 0.9 * 0.25, 0.1, 0.1});
  // TF's PiecewiseConstantDecay: values[0] up to and including boundary 0.
  ExpectRates("piecewise:1/3,values:0.5/0.25/0.125", {0.5, 0.5, 0.25, 0.25, 0.125});
}

TEST(LrScheduleTest, Warmup_RampsLinearlyThenStartsTheKindAtItsUnitZero) {
  ExpectRates("warmup:4", {0, 0.25, 0.5, 0.75, 1, 1});
  ExpectRates("warmup:2,warmup_start:0.5,step:1,gamma:0.5", {0.5, 0.75, 1, 0.5, 0.25});
  ExpectRates("warmup:2,cosine:2", {0, 0.5, 1, 0.5, 0, 0});
}

TEST(LrScheduleTest, Every_CountsInUnitsOfThatManySteps) {
  // torch's StepLR(step_size=2, gamma=0.5) stepped once per 3-step epoch.
  ExpectRates("step:2,gamma:0.5,every:3", {1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25});
  ExpectRates("warmup:1,every:2,exponential:0.5", {0, 0, 1, 1, 0.5, 0.5});
}

TEST(LrScheduleTest, Rate_ScalesTheBaseRate) {
  const proto::LrSchedule s = Parse("step:1,gamma:0.7");
  EXPECT_NEAR(LearningRateAt(0.01, s, 2), 0.01 * 0.7 * 0.7, 1e-15);
  // Piecewise values are rates themselves, whatever the base.
  EXPECT_EQ(LearningRateAt(0.01, Parse("piecewise:5,values:0.3/0.2"), 7), 0.2);
}

TEST(LrScheduleTest, String_ParsesBackToTheSameSchedule) {
  for (const std::string text :
       {"constant", "step:3,gamma:0.7", "multistep:10/20,gamma:0.1", "exponential:0.95",
        "cosine:100,min:0.001", "polynomial:50,min:0.01,power:2",
        "piecewise:10/20,values:0.1/0.01/0.001",
        "cosine:1000,warmup:10,warmup_start:0.1,every:5"}) {
    const proto::LrSchedule s = Parse(text);
    EXPECT_EQ(LrScheduleString(s), text);
    EXPECT_EQ(Parse(LrScheduleString(s)).SerializeAsString(), s.SerializeAsString()) << text;
  }
  EXPECT_EQ(LrScheduleString(Parse("warmup:500,cosine:10000,min:1e-5")),
            "cosine:10000,min:1e-05,warmup:500");
}

TEST(LrScheduleTest, BadText_IsInvalidArgumentNamingTheItem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"linear:5", "unknown item 'linear'"},
      {"step:x", "'step:x' needs a whole number"},
      {"step:0,gamma:0.5", "step size of at least 1"},
      {"step:2", "needs a gamma"},
      {"step:2,gamma:-1", "needs a gamma"},
      {"cosine:10,gamma:0.5", "'gamma' does not apply to cosine"},
      {"cosine:10,step:2", "two kinds"},
      {"cosine:10,cosine:20", "'cosine' given twice"},
      {"cosine:0", "decay units of at least 1"},
      {"cosine:10,min:-1", "min must be >= 0"},
      {"multistep:5/2,gamma:0.1", "increasing order"},
      {"piecewise:5/10,values:0.1/0.01", "one value more than boundaries"},
      {"piecewise:10/5,values:0.1/0.01/0.001", "boundaries must increase"},
      {"piecewise:5,values:0.1/0", "positive"},
      {"warmup:-3", "warmup must be >= 0"},
      {"warmup:3,warmup_start:2", "warmup_start must be in [0, 1]"},
      {"every:-1", "every must be >= 0"},
      {"constant:3", "constant takes no value"},
      {"polynomial:5,power:-1", "power must be >= 0"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<proto::LrSchedule> s = ParseLrSchedule(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_TRUE(absl::StrContains(s.status().message(), message)) << text << ": " << s.status();
  }
}

TEST(LrScheduleTest, CheckLrSchedule_RefusesAnUnknownKindFromTheWire) {
  proto::LrSchedule s;
  s.set_kind("triangle");
  EXPECT_TRUE(absl::StrContains(CheckLrSchedule(s).message(), "unknown kind 'triangle'"));
}

}  // namespace
}  // namespace pst::common
