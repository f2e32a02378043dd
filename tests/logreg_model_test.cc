// The logreg model end to end in one process: its own file's data loading,
// training loop and evaluation, through the registry, against real
// VariableStores behind the in-process transport (the test links the ps).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "data/libsvm.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "tests/in_process_ps.h"

namespace pst::models {
namespace {

class LogregModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/logreg_model_test_", getpid());
    std::filesystem::create_directories(dir_);
    model_ = *FindModel("logreg");
    training_.set_model("logreg");
    training_.set_batch_size(2);
    training_.set_epochs(1);
    training_.set_seed(1);
    training_.set_eval_fraction(0.5);
    training_.mutable_optimizer()->set_name("sgd");
    training_.mutable_optimizer()->set_learning_rate(0.1f);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // P in-process ps holding the model's variables, and a client to them.
  std::unique_ptr<client::PsClient> Cluster(int num_ps) {
    return testing::InProcessModelCluster(training_, num_ps);
  }

  std::string dir_;
  const Model* model_ = nullptr;
  proto::TrainingConfig training_;
};

TEST_F(LogregModelTest, Variables_HashTableAndBias_BucketsBoundTheTable) {
  std::vector<ModelVariable> vars = *model_->Variables(training_);
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_TRUE(vars[0].table);
  EXPECT_EQ(vars[0].spec.shape(0), 0);  // hash
  EXPECT_EQ(vars[0].spec.shape(1), 1);
  EXPECT_FALSE(vars[1].table);
  EXPECT_EQ(vars[1].spec.shape_size(), 1);
  training_.set_buckets(4096);
  EXPECT_EQ((*model_->Variables(training_))[0].spec.shape(0), 4096);
  training_.set_buckets(-1);
  EXPECT_EQ(model_->Variables(training_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LogregModelTest, OneSgdStep_UpdatesExactlyTheRowsOfTheBatch) {
  // Two training examples (and two held out). With w = 0, b = 0 both
  // predict 0.5, so dz = -0.5 and +0.5; the batch gradient is the sum:
  // w5: -0.5*1 + 0.5*0.5 = -0.25, w7: -0.5*2 = -1, bias: 0.
  training_.set_data(Write("a.svm",
                           "1 5:1 7:2\n"
                           "-1 5:0.5\n"
                           "1 5:1\n"
                           "0 9:1\n"));
  std::unique_ptr<client::PsClient> ps = Cluster(2);
  absl::StatusOr<std::unique_ptr<ModelData>> train = model_->Load(training_, "", false, 0, 1);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ((*train)->size(), 2);
  int steps = 0;
  float loss = 0;
  LoopControl control;
  control.on_step = [&](int64_t examples, float l, int, int64_t, int64_t position) {
    ++steps;
    loss = l;
    EXPECT_EQ(examples, 2);
    EXPECT_EQ(position, 1);
  };
  absl::StatusOr<int64_t> step = model_->Train(training_, **train, 1, ps.get(), control);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 1);
  EXPECT_EQ(steps, 1);
  EXPECT_NEAR(loss, std::log(2.0f), 1e-6);

  const std::vector<int64_t> ids = {5, 7, 9};
  std::vector<client::PsClient::TableIds> tables = {{"logreg/weights", ids}};
  client::Values rows;
  ASSERT_TRUE(ps->PullRows(tables, &rows).ok());
  EXPECT_FLOAT_EQ(rows[0][0], 0.025f);
  EXPECT_FLOAT_EQ(rows[0][1], 0.1f);
  EXPECT_FLOAT_EQ(rows[0][2], 0.0f);  // never trained on
  client::Values dense;
  ASSERT_TRUE(ps->Pull(&dense).ok());
  EXPECT_FLOAT_EQ(dense[0][0], 0.0f);

  // The held-out half: 5 scores sigmoid(0.025) > 0.5 for the positive, 9
  // scores 0.5 for the negative: a perfect ranking.
  absl::StatusOr<std::unique_ptr<ModelData>> test = model_->Load(training_, "", true, 0, 1);
  ASSERT_TRUE(test.ok()) << test.status();
  absl::StatusOr<ModelEvaluation> eval = model_->Evaluate(training_, **test, ps.get());
  ASSERT_TRUE(eval.ok()) << eval.status();
  ASSERT_EQ(eval->metrics.size(), 2u);
  EXPECT_EQ(eval->metrics[0].first, "test_auc");
  EXPECT_DOUBLE_EQ(eval->metrics[0].second, 1.0);
  EXPECT_EQ(eval->metrics[1].first, "test_logloss");
  const double p5 = 1 / (1 + std::exp(-0.025));
  EXPECT_NEAR(eval->metrics[1].second, -(std::log(p5) + std::log(0.5)) / 2, 1e-6);
  EXPECT_EQ(eval->counts, (std::vector<std::pair<std::string, int64_t>>{{"test_examples", 2}}));
  EXPECT_EQ(eval->global_step, 1);
}

TEST_F(LogregModelTest, Buckets_FoldIdsIntoTheTable) {
  training_.set_buckets(8);
  training_.set_data(Write("b.svm", "1 18446744073709551615:1\n0 3:1\n1 3:1\n0 3:1\n"));
  std::unique_ptr<client::PsClient> ps = Cluster(1);
  absl::StatusOr<std::unique_ptr<ModelData>> train = model_->Load(training_, "", false, 0, 1);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(model_->Train(training_, **train, 1, ps.get(), LoopControl()).ok());
  const int64_t row = data::LibsvmFeatureId(18446744073709551615ull, 8);
  ASSERT_GE(row, 0);
  ASSERT_LT(row, 8);
  std::vector<int64_t> ids = {row};
  std::vector<client::PsClient::TableIds> tables = {{"logreg/weights", ids}};
  client::Values rows;
  ASSERT_TRUE(ps->PullRows(tables, &rows).ok());
  EXPECT_NE(rows[0][0], 0.0f);
}

TEST_F(LogregModelTest, MalformedData_InvalidArgumentNamesTheLine) {
  training_.set_data(Write("bad.svm", "1 5:1\n1 5-1\n"));
  absl::StatusOr<std::unique_ptr<ModelData>> train = model_->Load(training_, "", false, 0, 1);
  ASSERT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(train.status().message().find("bad.svm:2"), std::string::npos)
      << train.status().message();
}

}  // namespace
}  // namespace pst::models
