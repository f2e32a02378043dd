#include "chief/step_advice.h"

#include <gtest/gtest.h>

#include <vector>

namespace pst::chief {
namespace {

proto::StepTimes Times(int64_t steps, double compute_s, double communication_s, double exposed_s) {
  proto::StepTimes t;
  t.set_steps(steps);
  t.set_compute_seconds(compute_s);
  t.set_communication_seconds(communication_s);
  t.set_exposed_seconds(exposed_s);
  t.set_pushed_bytes(steps * 4000);
  t.set_pulled_bytes(steps * 4000);
  return t;
}

proto::TrainingConfig Demo() {
  proto::TrainingConfig training;
  training.set_model("mlp");
  training.mutable_sync()->set_mode(proto::ASYNC);
  return training;
}

TEST(StepAdviceTest, NoWorkerReported_NoAdvice) {
  EXPECT_EQ(AdviseOnSteps({}, Demo()).worker, -1);
  EXPECT_EQ(AdviseOnSteps({proto::StepTimes()}, Demo()).worker, -1);
}

TEST(StepAdviceTest, CommunicationBound_SlowestWorker_NamesTheFlagsThatHelp) {
  // Worker 1: 1 ms compute + 3 ms waiting a step; worker 0 is faster.
  const std::vector<proto::StepTimes> times = {Times(100, 0.1, 0.2, 0.1),
                                               Times(100, 0.1, 0.3, 0.3)};
  const StepAdvice a = AdviseOnSteps(times, Demo());
  EXPECT_EQ(a.worker, 1);
  EXPECT_DOUBLE_EQ(a.step_ms, 4.0);
  EXPECT_DOUBLE_EQ(a.compute_ms, 1.0);
  EXPECT_DOUBLE_EQ(a.exposed_ms, 3.0);
  EXPECT_DOUBLE_EQ(a.communication_share, 0.75);
  EXPECT_EQ(a.advice,
            "communication is 75% of a step: try --wire_dtype=bf16 (where the network is the "
            "limit), --overlap or a larger --batch_size");
  EXPECT_NE(a.line.find("slowest worker 1: 4.00 ms a step: compute 1.00 ms, push+pull 3.00 ms"),
            std::string::npos)
      << a.line;
  // What the job has already, or cannot use, is not suggested.
  proto::TrainingConfig sync = Demo();
  sync.mutable_sync()->set_mode(proto::SYNC);
  sync.set_wire_dtype(proto::DT_BFLOAT16);
  EXPECT_EQ(AdviseOnSteps(times, sync).advice,
            "communication is 75% of a step: try a larger --batch_size");
  // ssp overlaps as async does, the models with tables as the mlp; a
  // model that does not overlap (here: none of that name) is not told to.
  proto::TrainingConfig ssp = sync;
  ssp.mutable_sync()->set_mode(proto::SSP);
  EXPECT_EQ(AdviseOnSteps(times, ssp).advice,
            "communication is 75% of a step: try --overlap or a larger --batch_size");
  proto::TrainingConfig wide_deep = ssp;
  wide_deep.set_model("wide_deep");
  EXPECT_EQ(AdviseOnSteps(times, wide_deep).advice,
            "communication is 75% of a step: try --overlap or a larger --batch_size");
  proto::TrainingConfig unknown = ssp;
  unknown.set_model("no_such_model");
  EXPECT_EQ(AdviseOnSteps(times, unknown).advice,
            "communication is 75% of a step: try a larger --batch_size");
}

TEST(StepAdviceTest, ComputeBoundAndBalanced) {
  EXPECT_EQ(AdviseOnSteps({Times(10, 0.09, 0.05, 0.01)}, Demo()).advice,
            "compute is 90% of a step: more workers, or a GPU (--device=gpu), would help most");
  EXPECT_EQ(AdviseOnSteps({Times(10, 0.06, 0.04, 0.04)}, Demo()).advice,
            "compute and communication are balanced (40% of a step communicating): --overlap "
            "would hide one behind the other");
  proto::TrainingConfig overlapped = Demo();
  overlapped.set_overlap(true);
  EXPECT_EQ(AdviseOnSteps({Times(10, 0.06, 0.04, 0.04)}, overlapped).advice,
            "compute and communication are balanced (40% of a step communicating)");
}

TEST(StepAdviceTest, Json_PerStepFiguresByWorker) {
  const nlohmann::json j = StepTimesJson({Times(100, 0.1, 0.3, 0.2), proto::StepTimes()});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["steps"], 100);
  EXPECT_DOUBLE_EQ(j[0]["compute_ms"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j[0]["communication_ms"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j[0]["exposed_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j[0]["pushed_kb"].get<double>(), 4.0);
  EXPECT_TRUE(j[1].is_null());
}

}  // namespace
}  // namespace pst::chief
