// BackgroundWork: the limit, a slot freed before the caller hears back,
// exceptions turned into statuses, and no new work once stopping. Waits
// are on notifications, never sleeps.
#include "ps_server/node/background_work.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "absl/synchronization/notification.h"

namespace pst::ps {
namespace {

TEST(BackgroundWorkTest, BeyondTheLimit_IsResourceExhausted_UntilAJobEnds) {
  BackgroundWork work(1);
  absl::Notification release, finished;
  ASSERT_TRUE(work.Start(
                      "save",
                      [&] {
                        release.WaitForNotification();
                        return absl::OkStatus();
                      },
                      [&](absl::Status) { finished.Notify(); })
                  .ok());
  const absl::Status refused = work.Start(
      "restore", [] { return absl::OkStatus(); }, [](absl::Status) {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  release.Notify();
  finished.WaitForNotification();
  absl::Notification again;
  EXPECT_TRUE(
      work.Start(
              "save", [] { return absl::OkStatus(); }, [&](absl::Status) { again.Notify(); })
          .ok());
  again.WaitForNotification();
}

// The caller of a job hears back only once its slot is free: a next
// request sent at once is taken (here, started from the finish itself).
TEST(BackgroundWorkTest, AJobsSlotIsFree_BeforeItsCallerHearsBack) {
  BackgroundWork work(1);
  absl::Notification second_done;
  absl::Status second_started = absl::UnknownError("not tried");
  ASSERT_TRUE(work.Start(
                      "save", [] { return absl::OkStatus(); },
                      [&](absl::Status) {
                        second_started = work.Start(
                            "save", [] { return absl::OkStatus(); },
                            [&](absl::Status) { second_done.Notify(); });
                        if (!second_started.ok()) second_done.Notify();
                      })
                  .ok());
  second_done.WaitForNotification();
  EXPECT_TRUE(second_started.ok()) << second_started;
}

TEST(BackgroundWorkTest, Exceptions_BecomeStatuses) {
  BackgroundWork work(2);
  absl::Notification a, b;
  absl::Status bad_alloc, other;
  ASSERT_TRUE(work.Start(
                      "restore", []() -> absl::Status { throw std::bad_alloc(); },
                      [&](absl::Status s) {
                        bad_alloc = s;
                        a.Notify();
                      })
                  .ok());
  ASSERT_TRUE(work.Start(
                      "save", []() -> absl::Status { throw std::runtime_error("disk on fire"); },
                      [&](absl::Status s) {
                        other = s;
                        b.Notify();
                      })
                  .ok());
  a.WaitForNotification();
  b.WaitForNotification();
  EXPECT_EQ(bad_alloc.code(), absl::StatusCode::kResourceExhausted) << bad_alloc;
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal) << other;
  EXPECT_NE(other.message().find("disk on fire"), absl::string_view::npos) << other;
}

TEST(BackgroundWorkTest, AfterStop_NewWorkIsUnavailable) {
  BackgroundWork work(2);
  work.Stop();
  const absl::Status refused = work.Start(
      "save", [] { return absl::OkStatus(); }, [](absl::Status) {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ(work.running(), 0);
}

}  // namespace
}  // namespace pst::ps
