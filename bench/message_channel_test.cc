#include "bench/message_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"

namespace pst::bench {
namespace {

// Two ends of one socketpair.
struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a = std::make_unique<MessageChannel>(fds[0]);
    b = std::make_unique<MessageChannel>(fds[1]);
  }
  std::unique_ptr<MessageChannel> a, b;
};

TEST(MessageChannelTest, MessagesArriveWholeAndInOrder) {
  Pair p;
  // Larger than one read, and than the socket's buffer: sent from another
  // thread while this one reads.
  const std::string big(1 << 20, 'x');
  std::thread sender([&] {
    EXPECT_TRUE(p.a->Send({{"n", 1}, {"big", big}}).ok());
    EXPECT_TRUE(p.a->Send({{"n", 2}, {"list", {1.5, 2.5}}}).ok());
  });
  absl::StatusOr<nlohmann::json> first = p.b->Receive(absl::Seconds(30));
  absl::StatusOr<nlohmann::json> second = p.b->Receive(absl::Seconds(30));
  sender.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)["n"], 1);
  EXPECT_EQ((*first)["big"], big);
  EXPECT_EQ((*second)["n"], 2);
  EXPECT_EQ((*second)["list"], (nlohmann::json{1.5, 2.5}));
}

TEST(MessageChannelTest, NoMessage_IsADeadline) {
  Pair p;
  absl::StatusOr<nlohmann::json> got = p.b->Receive(absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
}

// CPU seconds of the calling thread.
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec / 1e9;
}

// A worker process waits for its next message with no timeout, between
// cases that other workers run: it must sleep there, not spin.
TEST(MessageChannelTest, WaitingWithNoTimeout_Sleeps) {
  Pair p;
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(300));  // the idle wait under test
    EXPECT_TRUE(p.a->Send({{"late", true}}).ok());
  });
  const double cpu0 = ThreadCpuSeconds();
  absl::StatusOr<nlohmann::json> got = p.b->Receive(absl::InfiniteDuration());
  const double cpu = ThreadCpuSeconds() - cpu0;
  sender.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["late"], true);
  EXPECT_LT(cpu, 0.05) << "CPU seconds spent waiting 0.3 s";
}

TEST(MessageChannelTest, ClosedPeer_IsUnavailableBothWays) {
  Pair p;
  ASSERT_TRUE(p.a->Send({{"last", true}}).ok());
  p.a.reset();  // closes its end
  absl::StatusOr<nlohmann::json> got = p.b->Receive(absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();  // what was sent before the close
  EXPECT_EQ((*got)["last"], true);
  got = p.b->Receive(absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(got.status())) << got.status();
  EXPECT_TRUE(absl::IsUnavailable(p.b->Send({{"to", "nobody"}})));
}

TEST(MessageChannelTest, ALineThatIsNotJson_IsDataLoss) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  MessageChannel reader(fds[0]);
  const std::string garbage = "{not json\n{\"ok\": 1}\n";
  ASSERT_EQ(write(fds[1], garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  absl::StatusOr<nlohmann::json> got = reader.Receive(absl::Seconds(5));
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("{not json"), std::string::npos);
  got = reader.Receive(absl::Seconds(5));  // the next line still arrives
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["ok"], 1);
  close(fds[1]);
}

}  // namespace
}  // namespace pst::bench
