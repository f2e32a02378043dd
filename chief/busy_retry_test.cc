// CallWhileBusy: a busy ps is asked again; other answers, and a refusal
// that outlasts the budget, come back as they are.
#include "chief/busy_retry.h"

#include <gtest/gtest.h>

#include <vector>

namespace pst::chief {
namespace {

// A call that answers `answers` in turn, then OK; counts its calls.
struct Scripted {
  std::vector<absl::Status> answers;
  int calls = 0;
  absl::Status operator()() {
    const size_t i = static_cast<size_t>(calls++);
    return i < answers.size() ? answers[i] : absl::OkStatus();
  }
};

TEST(BusyRetryTest, BusyTwice_ThenDone_IsOkAfterThreeCalls) {
  Scripted s{{absl::ResourceExhaustedError("busy"), absl::ResourceExhaustedError("busy")}};
  EXPECT_TRUE(CallWhileBusy(std::ref(s), absl::Seconds(30), absl::Milliseconds(1)).ok());
  EXPECT_EQ(s.calls, 3);
}

TEST(BusyRetryTest, OtherErrors_AreNotRetried) {
  for (const absl::Status& error : {absl::FailedPreconditionError("x"), absl::UnavailableError("y"),
                                    absl::DataLossError("z")}) {
    Scripted s{{error}};
    EXPECT_EQ(CallWhileBusy(std::ref(s), absl::Seconds(30), absl::Milliseconds(1)), error);
    EXPECT_EQ(s.calls, 1);
  }
}

TEST(BusyRetryTest, BusyPastTheBudget_ReturnsTheRefusal) {
  int calls = 0;
  const absl::Status full = absl::ResourceExhaustedError("no space left on device");
  const absl::Time start = absl::Now();
  absl::Status status = CallWhileBusy(
      [&] {
        ++calls;
        return full;
      },
      absl::Milliseconds(200), absl::Milliseconds(10));
  EXPECT_EQ(status, full);
  EXPECT_GE(calls, 2);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
}

}  // namespace
}  // namespace pst::chief
