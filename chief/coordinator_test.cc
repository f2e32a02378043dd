#include "chief/coordinator.h"

#include <gtest/gtest.h>

#include <limits>
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
  r.set_position(-1);  // a new worker
  return r;
}

// A live worker registering again (with a restarted chief): where it is.
proto::RegisterRequest RegAt(int index, uint64_t incarnation, int64_t position,
                             int64_t generation, bool finished = false) {
  proto::RegisterRequest r = Reg(index, incarnation);
  r.set_position(position);
  r.set_generation(generation);
  r.set_finished(finished);
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
  absl::StatusOr<proto::RegisterResponse> r = c.Register(Reg(0, 1), kT0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state().phase(), proto::PHASE_RUNNING);
  EXPECT_EQ(r->state().num_workers(), 2);
  EXPECT_EQ(r->position(), 0);
}

TEST(CoordinatorTest, ClaimWorkerIndex_EachClaimantKeepsItsOwn_TakenIndicesAreSkipped) {
  proto::ClusterState state = TwoWorkers();
  state.set_num_workers(3);
  Coordinator c(state, absl::Seconds(10));
  // Claims work before the variables exist (phase INIT).
  EXPECT_EQ(c.ClaimWorkerIndex("a").value(), 0);
  c.SetPhase(proto::PHASE_RUNNING);
  // A worker with a fixed index (from its own TF_CONFIG) holds index 1.
  ASSERT_TRUE(c.Register(Reg(1, 7), kT0).ok());
  EXPECT_EQ(c.ClaimWorkerIndex("b").value(), 2);
  EXPECT_EQ(c.ClaimWorkerIndex("a").value(), 0) << "a restarted replica gets its index back";
  EXPECT_EQ(c.ClaimWorkerIndex("b").value(), 2);
  const absl::Status full = c.ClaimWorkerIndex("c").status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("all 3 worker indices are taken"), std::string::npos) << full;
  EXPECT_EQ(c.ClaimWorkerIndex("").status().code(), absl::StatusCode::kInvalidArgument);
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

TEST(CoordinatorTest, Heartbeat_VersionAboveWhatThePsHold_CountsOnlyUpToIt) {
  Coordinator c(TwoWorkers(/*max_steps=*/1000), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  c.SetVersionCeiling(40);  // the chief's probe: the ps are at version 40
  absl::StatusOr<proto::HeartbeatResponse> hb =
      c.Heartbeat(Beat(1, 2, 5, 1.0f, std::numeric_limits<int64_t>::max()), kT0);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->global_step(), 40);
  EXPECT_FALSE(hb->should_stop()) << "max_steps is not reached by a claim";
  EXPECT_EQ(c.Check(kT0).global_step, 40);
  // A report behind the ps counts as it is; the ceiling rises with them.
  ASSERT_TRUE(c.Heartbeat(Beat(0, 1, 5, 1.0f, 30), kT0).ok());
  EXPECT_EQ(c.Check(kT0).global_step, 40);
  c.SetVersionCeiling(55);
  EXPECT_EQ(c.Check(kT0).global_step, 55);
}

// Async: each worker's last push was answered before the other's landed,
// so both report 301 while the ps hold 302. Once both are done, the ps'
// version is the step; while one trains, the reports count.
TEST(CoordinatorTest, AllDone_GlobalStepIsThePsVersion_NotTheTrailingReports) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  c.SetVersionCeiling(302);
  proto::WorkerDoneRequest first = Done(0, 1, 151, true);
  first.mutable_final_progress()->set_version(301);
  ASSERT_TRUE(c.WorkerDone(first, kT0).ok());
  ASSERT_TRUE(c.Heartbeat(Beat(1, 2, 150, 1.0f, 300), kT0).ok());
  EXPECT_EQ(c.Check(kT0).global_step, 301) << "one worker still trains";
  proto::WorkerDoneRequest second = Done(1, 2, 151, true);
  second.mutable_final_progress()->set_version(301);
  ASSERT_TRUE(c.WorkerDone(second, kT0).ok());
  EXPECT_EQ(c.Check(kT0).global_step, 302);
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

// At the end of a job the chief waits until every live worker has been told
// to stop; a worker that left early is not waited for.
TEST(CoordinatorTest, WaitStopSeen_OnceEveryLiveWorkerWasToldTheJobEnded) {
  for (bool second_leaves_early : {false, true}) {
    SCOPED_TRACE(second_leaves_early);
    Coordinator c(TwoWorkers(/*max_steps=*/5), absl::Seconds(10));
    c.SetPhase(proto::PHASE_RUNNING);
    const absl::Time now = absl::Now();  // liveness is judged against the clock
    ASSERT_TRUE(c.Register(Reg(0, 1), now).ok());
    ASSERT_TRUE(c.Register(Reg(1, 2), now).ok());
    if (second_leaves_early) {
      ASSERT_TRUE(c.WorkerDone(Done(1, 2, 3, false), now).ok());
    }
    EXPECT_FALSE(c.Heartbeat(Beat(0, 1, 1), now)->should_stop());
    // --max_steps reached: should_stop, but the job has not ended yet.
    EXPECT_TRUE(c.Heartbeat(Beat(0, 1, 1, 1.0f, /*version=*/5), now)->should_stop());
    EXPECT_FALSE(c.WaitStopSeen(absl::Milliseconds(20)));
    // The end, as the chief ends a job.
    c.SetPhase(proto::PHASE_DONE);
    c.RequestStop("job done");
    EXPECT_FALSE(c.WaitStopSeen(absl::Milliseconds(20)));
    EXPECT_TRUE(c.Heartbeat(Beat(0, 1, 1), now)->should_stop());
    if (!second_leaves_early) {
      EXPECT_FALSE(c.WaitStopSeen(absl::Milliseconds(20)));
      EXPECT_TRUE(c.Heartbeat(Beat(1, 2, 1), now)->should_stop());
    }
    EXPECT_TRUE(c.WaitStopSeen(absl::ZeroDuration()));
  }
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
  EXPECT_EQ(c.Check(kT0).last_done, absl::InfinitePast());
  ASSERT_TRUE(c.WorkerDone(Done(0, 1, 4, true), kT0).ok());
  EXPECT_EQ(c.Check(kT0).last_done, kT0);
  std::thread last(
      [&] { ASSERT_TRUE(c.WorkerDone(Done(1, 2, 6, false), kT0 + absl::Seconds(3)).ok()); });
  EXPECT_TRUE(c.WaitAllDone(absl::Seconds(30)));
  last.join();
  const Coordinator::Snapshot s = c.Check(kT0);
  EXPECT_TRUE(s.all_done);
  EXPECT_EQ(s.done, 2);
  EXPECT_EQ(s.left_early, 1);
  EXPECT_EQ(s.pushes, 10);
  EXPECT_EQ(s.active, std::vector<int>());
  EXPECT_EQ(s.last_done, kT0 + absl::Seconds(3)) << "the chief's training time ends here";
}

proto::HeartbeatRequest BeatAt(int index, uint64_t incarnation, int64_t position,
                               int64_t generation, int64_t version) {
  proto::HeartbeatRequest r = Beat(index, incarnation, position, 1.0f, version);
  r.set_position(position);
  r.set_generation(generation);
  return r;
}

TEST(CoordinatorTest, Register_RestartedWorker_GoesOnFromItsLastPosition) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(BeatAt(0, 1, /*position=*/40, 0, /*version=*/70), kT0).ok());
  // Killed and restarted: a new incarnation with no position of its own.
  absl::StatusOr<proto::RegisterResponse> r = c.Register(Reg(0, 2), kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->position(), 40);
  // Its counters start again; the totals keep what the first one did.
  ASSERT_TRUE(c.Heartbeat(BeatAt(0, 2, 45, 0, 80), kT0).ok());
  const Coordinator::Snapshot s = c.Check(kT0);
  EXPECT_EQ(s.pushes, 40 + 45);
  EXPECT_EQ(s.positions, (std::vector<int64_t>{45, 0}));
}

TEST(CoordinatorTest, Register_LiveWorkerAfterChiefRestart_KeepsItsOwnPosition) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetGeneration(3);  // what the ps said
  c.SetPhase(proto::PHASE_RUNNING);
  proto::RegisterRequest live = RegAt(1, 7, /*position=*/123, /*generation=*/3);
  absl::StatusOr<proto::RegisterResponse> r = c.Register(live, kT0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->position(), 123);
  EXPECT_EQ(r->state().generation(), 3);
  // A position from another generation is not taken.
  live.set_incarnation(8);
  live.set_generation(2);
  live.set_position(999);
  EXPECT_EQ(c.Register(live, kT0)->position(), 123);
}

TEST(CoordinatorTest, Register_FinishedWorkerAfterChiefRestart_CountsAsDone_OnlyInItsGeneration) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetGeneration(2);  // what the ps said
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(RegAt(0, 7, /*position=*/900, /*generation=*/2, /*finished=*/true), kT0)
                  .ok());
  Coordinator::Snapshot s = c.Check(kT0);
  EXPECT_EQ(s.done, 1);
  EXPECT_EQ(s.left_early, 0);
  // Finished in a generation the ps no longer hold: it trains again.
  ASSERT_TRUE(c.Register(RegAt(1, 8, /*position=*/880, /*generation=*/1, /*finished=*/true), kT0)
                  .ok());
  s = c.Check(kT0);
  EXPECT_EQ(s.done, 1);
  EXPECT_FALSE(s.all_done);
  EXPECT_EQ(s.active, std::vector<int>{1});
}

TEST(CoordinatorTest, Recovery_NewGeneration_ResetsStepAndPositions_IgnoresOldReports) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(BeatAt(0, 1, 50, 0, 100), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(BeatAt(1, 2, 48, 0, 99), kT0).ok());

  EXPECT_EQ(c.BeginRecovery(), 1);
  EXPECT_EQ(c.Check(kT0).phase, proto::PHASE_RECOVERING);
  EXPECT_EQ(c.Register(Reg(0, 3), kT0).status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<proto::HeartbeatResponse> during = c.Heartbeat(BeatAt(0, 1, 51, 0, 101), kT0);
  ASSERT_TRUE(during.ok());
  EXPECT_EQ(during->phase(), proto::PHASE_RECOVERING);
  EXPECT_EQ(during->generation(), 1);

  c.ResetProgress(/*step=*/60, {30, 29});
  c.SetPhase(proto::PHASE_RUNNING);
  absl::StatusOr<proto::HeartbeatResponse> after = c.Heartbeat(BeatAt(1, 2, 49, 0, 102), kT0);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->generation(), 1);
  EXPECT_EQ(after->position(), 29);     // where worker 1 goes on from
  EXPECT_EQ(after->global_step(), 60);  // the old generation's report did not count
  // A worker that finished in the old generation is sent back to work.
  proto::WorkerDoneRequest done = Done(1, 2, 49, true);
  done.mutable_final_progress()->set_generation(0);
  EXPECT_EQ(c.WorkerDone(done, kT0).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(c.Heartbeat(BeatAt(1, 2, 31, 1, 61), kT0).ok());
  EXPECT_EQ(c.Check(kT0).global_step, 61);
  EXPECT_EQ(c.Check(kT0).positions, (std::vector<int64_t>{30, 31}));
}

TEST(CoordinatorTest, Recovery_AfterAWorkerFinished_SendsItBackToWork_NotOneThatLeft) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  ASSERT_TRUE(c.WorkerDone(Done(0, 1, 50, /*completed=*/true), kT0).ok());
  ASSERT_TRUE(c.WorkerDone(Done(1, 2, 20, /*completed=*/false), kT0).ok());
  ASSERT_TRUE(c.Check(kT0).all_done);

  // A ps lost before the chief's final save: the restore takes back what
  // worker 0 trained since the checkpoint, so the job is not done.
  c.BeginRecovery();
  c.ResetProgress(/*step=*/40, {35, 20});
  c.SetPhase(proto::PHASE_RUNNING);
  Coordinator::Snapshot s = c.Check(kT0);
  EXPECT_FALSE(s.all_done);
  EXPECT_EQ(s.done, 1);
  EXPECT_EQ(s.left_early, 1) << "worker 1 had left; it is not waited for";
  EXPECT_EQ(s.active, std::vector<int>{0});
  absl::StatusOr<proto::HeartbeatResponse> beat = c.Heartbeat(BeatAt(0, 1, 50, 0, 50), kT0);
  ASSERT_TRUE(beat.ok());
  EXPECT_EQ(beat->generation(), 1);
  EXPECT_EQ(beat->position(), 35);
  EXPECT_FALSE(beat->should_stop());

  // It finishes again, in the new generation.
  proto::WorkerDoneRequest again = Done(0, 1, 65, true);
  again.mutable_final_progress()->set_generation(1);
  ASSERT_TRUE(c.WorkerDone(again, kT0).ok());
  s = c.Check(kT0);
  EXPECT_TRUE(s.all_done);
  EXPECT_EQ(s.left_early, 1);
}

TEST(CoordinatorTest, Check_SilentWorker_IsNotActive_GiveUpLetsTheJobFinish) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(Beat(1, 2, 1), kT0 + absl::Seconds(20)).ok());
  Coordinator::Snapshot s = c.Check(kT0 + absl::Seconds(21));
  EXPECT_EQ(s.silent, std::vector<int>{0});
  EXPECT_EQ(s.silent_for[0], absl::Seconds(21));
  EXPECT_EQ(s.active, std::vector<int>{1});  // the quorum no longer counts worker 0
  c.GiveUp(0);
  ASSERT_TRUE(c.WorkerDone(Done(1, 2, 5, true), kT0 + absl::Seconds(22)).ok());
  s = c.Check(kT0 + absl::Seconds(22));
  EXPECT_TRUE(s.all_done);
  EXPECT_EQ(s.left_early, 1);
}

TEST(CoordinatorTest, GiveUp_WorkerThatSpeaksAgain_TakesPartAgain) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  c.GiveUp(0);
  EXPECT_EQ(c.Check(kT0).done, 1);
  ASSERT_TRUE(c.Heartbeat(Beat(0, 1, 3), kT0 + absl::Seconds(1)).ok());
  const Coordinator::Snapshot s = c.Check(kT0 + absl::Seconds(1));
  EXPECT_EQ(s.done, 0);
  EXPECT_EQ(s.active, (std::vector<int>{0, 1}));
}

TEST(CoordinatorTest, StepsRedone_FromHeartbeatsUntilTheWorkersReport_ThenTheirOwnFigures) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(BeatAt(0, 1, 50, 0, 100), kT0).ok());
  ASSERT_TRUE(c.Heartbeat(BeatAt(1, 2, 48, 0, 99), kT0).ok());
  EXPECT_EQ(c.StepsRedone().generation, 0) << "no restore yet";

  ASSERT_EQ(c.BeginRecovery(), 1);
  c.ResetProgress(/*step=*/60, {30, 29});
  c.SetPhase(proto::PHASE_RUNNING);
  // Until the workers say more, their last heartbeats before the loss.
  Coordinator::Redone redone = c.StepsRedone();
  EXPECT_EQ(redone.generation, 1);
  EXPECT_EQ(redone.steps, (std::vector<int64_t>{20, 19}));
  EXPECT_EQ(redone.known, (std::vector<bool>{false, false}));
  EXPECT_EQ(redone.step_before, 100);

  // Each had trained further than its last heartbeat said.
  proto::HeartbeatRequest beat = BeatAt(0, 1, 51, 1, 60);
  beat.mutable_left()->set_generation(0);
  beat.mutable_left()->set_position(57);
  beat.mutable_left()->set_version(115);
  ASSERT_TRUE(c.Heartbeat(beat, kT0).ok());
  redone = c.StepsRedone();
  EXPECT_EQ(redone.steps, (std::vector<int64_t>{27, 19}));
  EXPECT_EQ(redone.known, (std::vector<bool>{true, false}));
  EXPECT_EQ(redone.step_before, 115);
  // A report from the old generation changes nothing.
  proto::HeartbeatRequest old = BeatAt(1, 2, 49, 0, 120);
  old.mutable_left()->set_generation(0);
  old.mutable_left()->set_position(90);
  ASSERT_TRUE(c.Heartbeat(old, kT0).ok());
  EXPECT_EQ(c.StepsRedone().steps, (std::vector<int64_t>{27, 19}));
  proto::HeartbeatRequest second = BeatAt(1, 2, 50, 1, 61);
  second.mutable_left()->set_generation(0);
  second.mutable_left()->set_position(55);
  second.mutable_left()->set_version(114);
  ASSERT_TRUE(c.Heartbeat(second, kT0).ok());
  redone = c.StepsRedone();
  EXPECT_EQ(redone.steps, (std::vector<int64_t>{27, 26}));
  EXPECT_EQ(redone.known, (std::vector<bool>{true, true}));
  EXPECT_EQ(redone.step_before, 115);
}

TEST(CoordinatorTest, EpochEnd_HeldOnceEveryWorkerHolds_ReleasedForAll_ActiveAgain) {
  Coordinator c(TwoWorkers(), absl::Seconds(10));
  c.SetPhase(proto::PHASE_RUNNING);
  ASSERT_TRUE(c.Register(Reg(0, 1), kT0).ok());
  ASSERT_TRUE(c.Register(Reg(1, 2), kT0).ok());
  proto::HeartbeatRequest holding = BeatAt(0, 1, 10, 0, 20);
  holding.set_waiting_at_epoch_end(1);
  absl::StatusOr<proto::HeartbeatResponse> answer = c.Heartbeat(holding, kT0);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->epochs_released(), 0);
  EXPECT_EQ(c.HeldEpochEnd(), 0) << "worker 1 is still training";
  Coordinator::Snapshot snap = c.Check(kT0);
  EXPECT_EQ(snap.active, std::vector<int>{1});
  EXPECT_EQ(snap.holding, std::vector<int>{0});

  proto::HeartbeatRequest other = BeatAt(1, 2, 10, 0, 20);
  other.set_waiting_at_epoch_end(1);
  ASSERT_TRUE(c.Heartbeat(other, kT0).ok());
  EXPECT_EQ(c.HeldEpochEnd(), 1);
  EXPECT_EQ(c.Check(kT0).epoch_end_held, 1);

  c.ReleaseEpoch(1);
  EXPECT_EQ(c.HeldEpochEnd(), 0);
  snap = c.Check(kT0);
  EXPECT_EQ(snap.active, (std::vector<int>{0, 1})) << "released: training again";
  EXPECT_TRUE(snap.holding.empty());
  answer = c.Heartbeat(holding, kT0);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->epochs_released(), 1);

  // A restore to a checkpoint before that epoch's end: it is held at again.
  ASSERT_EQ(c.BeginRecovery(), 1);
  c.ResetProgress(5, {2, 3});
  c.ResetEpochsReleased(0);
  c.SetPhase(proto::PHASE_RUNNING);
  holding.set_generation(1);
  other.set_generation(1);
  ASSERT_TRUE(c.Heartbeat(holding, kT0).ok());
  ASSERT_TRUE(c.Heartbeat(other, kT0).ok());
  EXPECT_EQ(c.HeldEpochEnd(), 1);
}

}  // namespace
}  // namespace pst::chief
