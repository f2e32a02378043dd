// The in-process control plane: PsNode's logic reached through
// InProcessPsControl over the same ps the in-process data transport uses,
// and the failures a test can cause (a restart, a ps down, an intercepted
// call, a disconnected caller).
#include "ps_server/in_process_control.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "ps_server/in_process_transport.h"

namespace pst::ps {
namespace {

proto::CreateVariablesRequest CreateRequest() {
  proto::CreateVariablesRequest request;
  proto::VariableSpec* spec = request.add_variables();
  spec->set_name("w");
  spec->set_dtype(proto::DT_FLOAT32);
  spec->add_shape(4);
  spec->mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
  spec->mutable_initializer()->set_scale(1.0f);
  spec->mutable_initializer()->set_seed(3);
  request.mutable_optimizer()->set_name("sgd");
  request.mutable_optimizer()->set_learning_rate(0.5f);
  return request;
}

class InProcessPsControlTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(testing::TempDir(), "/in_process_control_",
                        testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    InProcessPs::Options options;
    options.checkpoint_dir = dir_;
    ps_ = std::make_shared<InProcessPs>(2, options);
    control_ = std::make_unique<InProcessPsControl>(ps_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::shared_ptr<InProcessPs> ps_;
  std::unique_ptr<InProcessPsControl> control_;
};

TEST_F(InProcessPsControlTest, CreateVariables_Twice_CreatesOnceAndReachesTheTransportsStores) {
  absl::StatusOr<proto::CreateVariablesResponse> first =
      control_->CreateVariables(1, CreateRequest(), absl::Seconds(1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->created(), 1);
  EXPECT_EQ(control_->CreateVariables(1, CreateRequest(), absl::Seconds(1))->created(), 0);
  InProcessPsTransport transport(ps_);
  EXPECT_EQ(transport.store(1)->GetStats().num_variables, 1);
  EXPECT_EQ(transport.store(0)->GetStats().num_variables, 0);
}

TEST_F(InProcessPsControlTest, Health_AfterRestart_HasANewIncarnationAndNoVariables) {
  ASSERT_TRUE(control_->CreateVariables(0, CreateRequest(), absl::Seconds(1)).ok());
  absl::StatusOr<proto::HealthResponse> before = control_->Health(0, {}, absl::Seconds(1));
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->task(), "ps-0");
  EXPECT_EQ(before->incarnation(), InProcessPs::IncarnationOf(0, 0));
  EXPECT_EQ(before->num_variables(), 1);
  ps_->Restart(0);
  absl::StatusOr<proto::HealthResponse> after = control_->Health(0, {}, absl::Seconds(1));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->incarnation(), InProcessPs::IncarnationOf(0, 1));
  EXPECT_EQ(after->num_variables(), 0);
}

TEST_F(InProcessPsControlTest, Calls_ToAPsDown_FailUnavailableUntilItIsUp) {
  ps_->SetDown(1, true);
  EXPECT_EQ(control_->Health(1, {}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(control_->Health(0, {}, absl::Seconds(1)).ok());
  ps_->SetDown(1, false);
  EXPECT_TRUE(control_->Health(1, {}, absl::Seconds(1)).ok());
}

TEST_F(InProcessPsControlTest, SaveThenRestore_WritesTheShardAndRestoresInTheGeneration) {
  ASSERT_TRUE(control_->CreateVariables(0, CreateRequest(), absl::Seconds(1)).ok());
  proto::SaveRequest save;
  save.set_phase(proto::SaveRequest::SNAPSHOT_AND_WRITE);
  save.set_checkpoint(common::CheckpointDirName(0));
  save.set_num_ps(1);
  save.set_incarnation(InProcessPs::IncarnationOf(0, 0));
  absl::StatusOr<proto::SaveResponse> saved = control_->Save(0, save, absl::Seconds(1));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_TRUE(std::filesystem::exists(
      absl::StrCat(dir_, "/", save.checkpoint(), "/", saved->shard().file())));
  // A save naming an older incarnation is refused: that ps lost its state.
  save.set_incarnation(1);
  EXPECT_EQ(control_->Save(0, save, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);

  proto::RestoreRequest restore;
  restore.set_checkpoint(save.checkpoint());
  *restore.mutable_manifest()->add_shards() = saved->shard();
  restore.set_generation(3);
  absl::StatusOr<proto::RestoreResponse> restored = control_->Restore(0, restore, absl::Seconds(1));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->variables_restored(), 1);
  EXPECT_EQ(control_->Health(0, {}, absl::Seconds(1))->generation(), 3);
}

TEST_F(InProcessPsControlTest, Interceptor_FailsTheCallBeforeItReachesThePs) {
  control_->SetInterceptor([](int ps, const google::protobuf::Message& request) {
    if (ps == 1 && request.GetDescriptor() == proto::CreateVariablesRequest::descriptor()) {
      return absl::DeadlineExceededError("intercepted");
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(control_->CreateVariables(1, CreateRequest(), absl::Seconds(1)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ps_->server(1)->store.GetStats().num_variables, 0);
  EXPECT_TRUE(control_->CreateVariables(0, CreateRequest(), absl::Seconds(1)).ok());
}

TEST_F(InProcessPsControlTest, Shutdown_AfterDisconnect_ReachesNoPs) {
  InProcessPsControl other(ps_);
  control_->Disconnect();
  EXPECT_EQ(control_->Shutdown(0, {}, absl::Seconds(1)).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ps_->server(0)->shutdown.stopped());
  ASSERT_TRUE(other.Shutdown(0, {}, absl::Seconds(1)).ok());
  EXPECT_TRUE(ps_->server(0)->shutdown.stopped());
}

}  // namespace
}  // namespace pst::ps
