#include "chief/coordinator.h"

#include <gtest/gtest.h>

#include <thread>

namespace pst::chief {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

proto::ClusterState TwoWorkers(int64_t max_steps = 0) {
  proto::ClusterState state;
  state.set_num_workers(2);
  state.add_ps_addresses("h:1");
  state.mutable_training()->set_max_steps(max_steps);
  return state;
}

proto::RegisterRequest Reg(int index, uint64_t incarnation) {
  proto::RegisterRequest r;
  r.set_worker_index(index);
  r.set_incarnation(incarnation);
  return r;
}

proto::HeartbeatRequest Beat(int index, uint64_t incarnation, int64_t steps, float loss = 1.0f,
                             int64_t version = 0) {
  proto::HeartbeatRequest r;
  r.set_worker_index(index);
  r.set_incarnation(incarnation);
  r.set_steps(steps);
  r.set_version(version);
  r.set_examples(steps * 10);
  r.set_loss(loss);
  return r;
}

proto::WorkerDoneRequest Done(int index, uint64_t incarnation, int64_t steps, bool completed) {
  proto::WorkerDoneRequest r;
  *r.mutable_final_progress() = Beat(index, incarnation, steps);
  r.set_completed(completed);
  return r;
}

TEST(CoordinatorTest, Register_DuringInit_IsUnavailable) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  EXPECT_EQ(c.Register(Reg(0, 1), kT0).status().code(), absl::StatusCode::kUnavailable);
  c.SetPhase(proto::PHASE_RUNNING);
  absl::StatusOr<proto::ClusterState> state = c.Register(Reg(0, 1), kT0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->phase(), proto::PHASE_RUNNING);
  EXPECT_EQ(state->num_workers(), 2);
}

TEST(CoordinatorTest, Register_BadIndex_IsInvalidArgument) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  EXPECT_EQ(c.Register(Reg(2, 1), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Register(Reg(-1, 1), kT0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorTest, Register_AfterDone_IsFailedPrecondition) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_DONE);
  EXPECT_EQ(c.Register(Reg(0, 1), kT0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CoordinatorTest, Heartbeat_GlobalStepIsHighestVersion_PushesAreSummed) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 11), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 22), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(Beat(0, 11, 5, 2.0f, /*version=*/10), kT0).ok());
  absl::StatusOr<proto::HeartbeatResponse> r = c.Heartbeat(Beat(1, 22, 7, 1.0f, 9), kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->global_step(), 10);
  EXPECT_FALSE(r->should_stop());
  const Coordinator::Snapshot s = c.Check(kT0);
  EXPECT_EQ(s.global_step, 10);
  EXPECT_EQ(s.pushes, 12);
  EXPECT_EQ(s.examples, 120);
  EXPECT_DOUBLE_EQ(s.loss, 1.5);
  EXPECT_EQ(s.registered, 2);
  EXPECT_FALSE(s.all_done);
}

TEST(CoordinatorTest, Heartbeat_UnregisteredOrStaleIncarnation_IsRejected) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  EXPECT_EQ(c.Heartbeat(Beat(0, 1, 1), kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(0, 2), kT0).ok());  // the worker restarted
  EXPECT_EQ(c.Heartbeat(Beat(0, 1, 1), kT0).status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(c.Heartbeat(Beat(0, 2, 1), kT0).ok());
}

TEST(CoordinatorTest, Heartbeat_MaxStepsReached_SaysStop) {
  Coordinator c(TwoWorkers(/*max_steps=*/10), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  EXPECT_FALSE(c.Heartbeat(Beat(0, 1, 20, 1.0f, /*version=*/9), kT0)->should_stop());
  EXPECT_TRUE(c.Heartbeat(Beat(0, 1, 21, 1.0f, /*version=*/10), kT0)->should_stop());
}

TEST(CoordinatorTest, RequestStop_MakesHeartbeatsSayStop) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  c.RequestStop("test");
  EXPECT_TRUE(c.Heartbeat(Beat(0, 1, 1), kT0)->should_stop());
}

TEST(CoordinatorTest, Check_SilentWorker_IsReportedAfterPeerTimeout) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(Beat(1, 2, 1), kT0 + absl::Seconds(8)).ok());
  EXPECT_TRUE(c.Check(kT0 + absl::Seconds(9)).silent.empty());
  EXPECT_EQ(c.Check(kT0 + absl::Seconds(11)).silent, std::vector<int>{0});
  ASSERT_TRUE(c.WorkerDone(Done(0, 1, 3, true), kT0 + absl::Seconds(12)).ok());
  EXPECT_TRUE(c.Check(kT0 + absl::Seconds(30)).silent.size() == 1);  // worker 1 only
  EXPECT_EQ(c.Check(kT0 + absl::Seconds(30)).silent[0], 1);
}

TEST(CoordinatorTest, WorkerDone_AllWorkers_CompletesAndWakesWaiter) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  EXPECT_FALSE(c.WaitAllDone(absl::ZeroDuration()));
  ASSERT_TRUE(c.WorkerDone(Done(0, 1, 4, true), kT0).ok());
  std::thread last([&] { ASSERT_TRUE(c.WorkerDone(Done(1, 2, 6, false), kT0).ok()); });
  EXPECT_TRUE(c.WaitAllDone(absl::Seconds(30)));
  last.join();
  const Coordinator::Snapshot s = c.Check(kT0);
  EXPECT_TRUE(s.all_done);
  EXPECT_EQ(s.done, 2);
  EXPECT_EQ(s.left_early, 1);
  EXPECT_EQ(s.pushes, 10);
  EXPECT_EQ(s.active, std::vector<int>());
}

}  // namespace
}  // namespace pst::chief
