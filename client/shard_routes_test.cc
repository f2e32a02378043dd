// ShardRoutes and the routed transport: requests follow their shard to its
// primary, and a call that fails as a lost ps fails is sent again, the same
// request, once its shard moves.
#include "client/shard_routes.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pst::client {
namespace {

// Answers Push calls: ps in `down` fail with `failure`, the others succeed.
// Records which ps each call reached and the request it carried.
class FakeTransport : public common::PsTransport {
 public:
  int num_ps() const override { return 3; }
  void Pull(int, const proto::PullRequest*, proto::PullResponse*, Done done) override {
    done(absl::UnimplementedError("pull"));
  }
  void Push(int ps, const proto::PushRequest* request, proto::PushResponse*, Done done) override {
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back({ps, request});
      status = ps == down_ ? failure_ : absl::OkStatus();
    }
    done(status);
  }
  void PushPull(int, const proto::PushPullRequest*, proto::PullResponse*, Done done) override {
    done(absl::UnimplementedError("pushpull"));
  }
  void PullRows(int, const proto::PullRowsRequest*, proto::PullRowsResponse*, Done done) override {
    done(absl::UnimplementedError("pullrows"));
  }
  void PushRows(int, const proto::PushRowsRequest*, proto::PushRowsResponse*, Done done) override {
    done(absl::UnimplementedError("pushrows"));
  }
  std::string Describe(int ps) const override { return "ps " + std::to_string(ps); }

  void Fail(int ps, absl::Status failure) {
    absl::MutexLock lock(&mu_);
    down_ = ps;
    failure_ = std::move(failure);
  }
  std::vector<std::pair<int, const proto::PushRequest*>> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  int down_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, const proto::PushRequest*>> calls_ ABSL_GUARDED_BY(mu_);
};

google::protobuf::RepeatedPtrField<proto::ShardCopies> Layout(std::vector<int> primaries) {
  google::protobuf::RepeatedPtrField<proto::ShardCopies> shards;
  for (int p : primaries) shards.Add()->set_primary(p);
  return shards;
}

proto::PlacementPlan Plan(int num_ps, int replicas) {
  proto::PlacementPlan plan;
  plan.set_num_ps(num_ps);
  plan.set_replicas(replicas);
  for (int g = 0; g < num_ps; ++g) {
    plan.add_shards()->set_primary(g);
    plan.mutable_shards(g)->set_backup((g + 1) % num_ps);
  }
  return plan;
}

TEST(ShardRoutesTest, NewerVersionsMoveShards_OlderOnesAreIgnored) {
  std::shared_ptr<ShardRoutes> routes = ShardRoutes::FromPlan(Plan(3, 2), 0);
  EXPECT_TRUE(routes->replicated());
  EXPECT_EQ(routes->PsOf(2), 2);
  EXPECT_TRUE(routes->Set(2, Layout({0, 1, 0})));
  EXPECT_EQ(routes->PsOf(2), 0);
  EXPECT_FALSE(routes->Set(1, Layout({0, 1, 2})));  // older
  EXPECT_EQ(routes->PsOf(2), 0);
  EXPECT_FALSE(routes->Set(3, Layout({0, 7, -1})));  // no such ps: ignored
  EXPECT_EQ(routes->PsOf(1), 1);
  EXPECT_EQ(routes->version(), 3);
}

TEST(RoutedTransportTest, ACallToALostPrimaryIsSentAgainToTheNewOne) {
  auto fake = std::make_shared<FakeTransport>();
  std::shared_ptr<ShardRoutes> routes = ShardRoutes::FromPlan(Plan(3, 2), 0);
  std::unique_ptr<common::PsTransport> routed = MakeRoutedTransport(fake, routes);
  fake->Fail(1, absl::UnavailableError("ps 1 is gone"));
  proto::PushRequest request;
  proto::PushResponse response;
  absl::Notification done;
  absl::Status status = absl::UnknownError("not answered");
  routed->Push(1, &request, &response, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  // Held: its shard has not moved yet.
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  routes->Set(1, Layout({0, 2, 2}));  // shard 1's backup on ps 2 took over
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(status.ok()) << status;
  const auto calls = fake->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].first, 1);
  EXPECT_EQ(calls[1].first, 2);
  EXPECT_EQ(calls[1].second, &request) << "the same request, sent again";
}

TEST(RoutedTransportTest, HeldCallsFailWithTheirErrorWhenNoLongerHeld) {
  auto fake = std::make_shared<FakeTransport>();
  std::shared_ptr<ShardRoutes> routes = ShardRoutes::FromPlan(Plan(2, 2), 0);
  std::unique_ptr<common::PsTransport> routed = MakeRoutedTransport(fake, routes);
  fake->Fail(0, absl::UnavailableError("ps 0 is gone"));
  proto::PushRequest request;
  proto::PushResponse response;
  absl::Notification done;
  absl::Status status;
  routed->Push(0, &request, &response, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  routes->SetHold(false);  // the chief restores from a checkpoint instead
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake->calls().size(), 1u);
}

TEST(RoutedTransportTest, WithoutReplicasOrForBadInput_FailuresAreAnsweredAtOnce) {
  auto fake = std::make_shared<FakeTransport>();
  proto::PushRequest request;
  proto::PushResponse response;
  absl::Status status;
  // One copy: shard g is ps g, and nothing is held.
  std::unique_ptr<common::PsTransport> plain =
      MakeRoutedTransport(fake, ShardRoutes::FromPlan(Plan(2, 1), 0));
  fake->Fail(1, absl::UnavailableError("gone"));
  plain->Push(1, &request, &response, [&](absl::Status s) { status = std::move(s); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  // Replicated, but the ps refused the request itself.
  std::unique_ptr<common::PsTransport> routed =
      MakeRoutedTransport(fake, ShardRoutes::FromPlan(Plan(2, 2), 0));
  fake->Fail(1, absl::InvalidArgumentError("wrong shape"));
  routed->Push(1, &request, &response, [&](absl::Status s) { status = std::move(s); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(routed->num_ps(), 2);
}

}  // namespace
}  // namespace pst::client
