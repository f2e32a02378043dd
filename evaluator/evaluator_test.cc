// The evaluator's pieces over real checkpoints: an MLP job's variables on
// two in-process ps, trained by pushes and saved by the chief's own save
// (SaveCheckpoint). The watcher finds each checkpoint once, oldest first,
// and names a corrupt one; best/ keeps the best by its metric; the session
// reports every checkpoint to a chief stand-in and ends after the final
// one; the built-in evaluation of a checkpoint restored onto one ps scores
// what the live ps score. The test links the ps and the chief's library.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "chief/checkpointing.h"
#include "chief/job.h"
#include "chief/ps_peers.h"
#include "client/ps_client.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_export.h"
#include "common/checkpoint_format.h"
#include "evaluator/best_checkpoint.h"
#include "evaluator/builtin_eval.h"
#include "evaluator/checkpoint_watcher.h"
#include "evaluator/evaluator_session.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "ps_server/in_process_control.h"
#include "ps_server/in_process_ps.h"
#include "ps_server/in_process_transport.h"

namespace pst::evaluator {
namespace {

namespace fs = std::filesystem;

constexpr int kNumPs = 2;
constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

// A chief stand-in: answers GetState with the state a test sets, and keeps
// every report.
class FakeChief final : public ChiefLink {
 public:
  void Set(proto::Phase phase, int64_t final_step) {
    absl::MutexLock lock(&mu_);
    state_.set_phase(phase);
    state_.set_final_checkpoint_step(final_step);
  }
  void SetReported(int evaluator, int64_t step) {
    absl::MutexLock lock(&mu_);
    (*state_.mutable_evaluated_steps())[evaluator] = step;
  }
  void SetDown(bool down) {
    absl::MutexLock lock(&mu_);
    down_ = down;
  }
  std::vector<proto::EvaluationReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  absl::StatusOr<proto::ClusterState> GetState(absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("chief down");
    return state_;
  }
  absl::StatusOr<proto::ReportEvaluationResponse> ReportEvaluation(
      const proto::EvaluationReport& report, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("chief down");
    reports_.push_back(report);
    proto::ReportEvaluationResponse response;
    response.set_phase(state_.phase());
    response.set_final_checkpoint_step(state_.final_checkpoint_step());
    return response;
  }

 private:
  absl::Mutex mu_;
  bool down_ = false;
  proto::ClusterState state_;
  std::vector<proto::EvaluationReport> reports_;
};

class EvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/evaluator_test_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.tf.cluster.ps = {"ps0:1", "ps1:1"};
    options_.tf.cluster.worker = {"worker0:1"};
    options_.tf.cluster.chief = {"chief:1"};
    options_.checkpoint_dir = dir_;
    options_.keep_checkpoints = 100;
    proto::TrainingConfig& training = options_.training;
    training.set_model("mlp");
    training.add_hidden_units(16);
    training.set_batch_size(32);
    training.set_epochs(1);
    training.set_seed(7);
    training.mutable_optimizer()->set_name("sgd");
    training.mutable_optimizer()->set_learning_rate(0.1f);
    training.set_placement("round_robin");
    absl::StatusOr<chief::JobPlan> plan = chief::PlanJob(options_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *std::move(plan);
    ps::InProcessPs::Options ps_options;
    ps_options.checkpoint_dir = dir_;
    ps_ = std::make_shared<ps::InProcessPs>(kNumPs, ps_options);
    control_ = std::make_unique<ps::InProcessPsControl>(ps_);
    for (int i = 0; i < kNumPs; ++i) {
      ASSERT_TRUE(chief::CreatePlanOnPs(*control_, i, i, options_.tf.cluster.ps[i], plan_.initial,
                                        nullptr, absl::InfiniteFuture(), *common::RealClock(),
                                        stop_)
                      .ok());
      chief::PsPeer peer;
      peer.address = options_.tf.cluster.ps[i];
      peer.incarnation = ps::InProcessPs::IncarnationOf(i, 0);
      peers_.push_back(peer);
    }
    absl::StatusOr<std::vector<models::ModelVariable>> variables =
        (*models::ModelFor(training))->Variables(training);
    ASSERT_TRUE(variables.ok());
    absl::StatusOr<std::unique_ptr<client::PsClient>> client =
        client::PsClient::Create(plan_.initial.plan(), models::DenseNames(*variables),
                                 std::make_shared<ps::InProcessPsTransport>(ps_), 0, 1);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Pushes `steps` random gradients, then saves a checkpoint at the version
  // reached (`kind`: full, or incremental); returns its directory.
  std::string TrainAndSave(int steps, int epochs_completed = 0, const chief::SaveKind& kind = {}) {
    client::Values values;
    EXPECT_TRUE(client_->Pull(&values).ok());
    std::normal_distribution<float> noise(0, 0.05f);
    for (int s = 0; s < steps; ++s) {
      client::Values grads = values;
      for (auto& g : grads) {
        for (float& x : g) x = noise(rng_);
      }
      absl::StatusOr<int64_t> version = client_->PushPull(++step_, version_, grads, &values);
      EXPECT_TRUE(version.ok()) << version.status();
      version_ = version.value_or(version_);
    }
    absl::StatusOr<chief::SaveFigures> saved = chief::SaveCheckpoint(
        *control_, peers_, options_, plan_.initial, version_, {step_}, epochs_completed, 0, kind);
    EXPECT_TRUE(saved.ok()) << saved.status();
    return (fs::path(dir_) / common::CheckpointDirName(version_)).string();
  }

  std::string dir_;
  chief::ChiefOptions options_;
  chief::JobPlan plan_;
  std::shared_ptr<ps::InProcessPs> ps_;
  std::unique_ptr<ps::InProcessPsControl> control_;
  std::vector<chief::PsPeer> peers_;
  std::unique_ptr<client::PsClient> client_;
  common::StopSignal stop_;
  std::mt19937 rng_{3};
  int64_t step_ = 0;
  int64_t version_ = 0;
};

TEST_F(EvaluatorTest, WatcherTakesEachCheckpointOnceOldestFirst) {
  CheckpointWatcher watcher(dir_);
  absl::StatusOr<std::optional<FoundCheckpoint>> none = watcher.Next();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  const std::string first = TrainAndSave(3, 1);
  const std::string second = TrainAndSave(2, 2);
  // A save in progress (no manifest yet) is not a checkpoint yet.
  fs::create_directories(fs::path(dir_) / common::CheckpointDirName(999));
  for (const std::string& want : {first, second}) {
    absl::StatusOr<std::optional<FoundCheckpoint>> found = watcher.Next();
    ASSERT_TRUE(found.ok()) << found.status();
    ASSERT_TRUE(found->has_value());
    EXPECT_EQ((*found)->path, want);
    EXPECT_TRUE((*found)->problem.ok()) << (*found)->problem;
    EXPECT_EQ((*found)->manifest.global_step(), (*found)->step);
  }
  EXPECT_EQ(watcher.Next()->has_value(), false);
  const std::string third = TrainAndSave(1, 3);
  absl::StatusOr<std::optional<FoundCheckpoint>> found = watcher.Next();
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->path, third);
  EXPECT_EQ((*found)->manifest.epochs_completed(), 3);
}

TEST_F(EvaluatorTest, WatcherNamesAMissingRootAndACorruptCheckpoint) {
  CheckpointWatcher missing(dir_ + "/nope");
  absl::StatusOr<std::optional<FoundCheckpoint>> found = missing.Next();
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(found.status().message().find(dir_ + "/nope"), std::string::npos);
  std::ofstream(dir_ + "/a_file") << "x";
  CheckpointWatcher file(dir_ + "/a_file");
  EXPECT_EQ(file.Next().status().code(), absl::StatusCode::kFailedPrecondition);

  const std::string saved = TrainAndSave(2);
  const std::string shard = (fs::path(saved) / common::ShardFileName(1, kNumPs)).string();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put('\x5a');
  }
  CheckpointWatcher watcher(dir_);
  found = watcher.Next();
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->problem.code(), absl::StatusCode::kDataLoss) << (*found)->problem;
  EXPECT_NE((*found)->problem.message().find("shard-1-of-2"), std::string::npos)
      << (*found)->problem;
}

TEST_F(EvaluatorTest, BestKeepsTheBestByItsMetricAndMode) {
  const std::string a = TrainAndSave(1);
  const std::string b = TrainAndSave(1);
  const std::string c = TrainAndSave(1);
  const fs::path best_dir = fs::path(dir_) / kBestDir;
  {
    BestCheckpoint best(dir_, "", BestMode::kAuto);
    EXPECT_TRUE(*best.Offer(a, 1, {{"test_loss", 0.9}, {"test_accuracy", 0.5}}));
    EXPECT_EQ(best.metric(), "test_accuracy");
    EXPECT_TRUE(*best.Offer(b, 2, {{"test_loss", 0.8}, {"test_accuracy", 0.7}}));
    EXPECT_FALSE(*best.Offer(c, 3, {{"test_loss", 0.7}, {"test_accuracy", 0.6}}));
  }
  // best/ is b, whole: it passes every check a restore makes.
  absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(best_dir.string());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->global_step, common::ReadManifest(b)->global_step());
  // It is neither a checkpoint the chief restores nor one it prunes.
  for (const std::string& listed : common::ListCheckpoints(dir_)) EXPECT_NE(listed, best_dir);
  // A restarted evaluator compares with the best kept; a loss is minimized.
  BestCheckpoint again(dir_, "", BestMode::kAuto);
  EXPECT_EQ(again.best_value(), 0.7);
  EXPECT_FALSE(*again.Offer(c, 3, {{"test_accuracy", 0.69}}));
  BestCheckpoint loss(dir_, "test_loss", BestMode::kAuto);
  EXPECT_FALSE(loss.best_value().has_value());  // best/ was chosen by another metric
  EXPECT_TRUE(*loss.Offer(a, 1, {{"test_loss", 0.9}}));
  EXPECT_TRUE(*loss.Offer(c, 3, {{"test_loss", 0.7}}));
  EXPECT_FALSE(*loss.Offer(b, 2, {{"test_loss", 0.8}}));
  EXPECT_FALSE(*loss.Offer(b, 2, {{"other", 0.1}}));  // no such metric: nothing changes
  std::ifstream in(best_dir / kBestFile);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(fs::path(c).filename().string()), std::string::npos) << text;
  EXPECT_NE(text.find("\"min\""), std::string::npos) << text;
  EXPECT_FALSE(ParseBestMode("maximum").ok());
}

// The best checkpoint an incremental one: best/ holds its chain folded, a
// whole checkpoint of its instant that needs none of the links.
TEST_F(EvaluatorTest, BestOfAnIncrementalCheckpoint_IsWholeWithoutItsChain) {
  chief::SaveKind kind;
  kind.track_changes = true;
  const std::string full = TrainAndSave(2, 0, kind);
  kind.base = fs::path(full).filename().string();
  const std::string link = TrainAndSave(1, 0, kind);
  ASSERT_EQ(common::ReadManifest(link)->base(), kind.base);
  BestCheckpoint best(dir_, "test_accuracy", BestMode::kMax);
  ASSERT_TRUE(*best.Offer(link, 3, {{"test_accuracy", 0.5}}));
  const fs::path best_dir = fs::path(dir_) / kBestDir;
  common::ExportOptions slots;
  slots.include_slots = true;
  absl::StatusOr<common::ExportResult> of_link =
      common::ExportSafetensors(link, dir_ + "/link.safetensors", slots);
  ASSERT_TRUE(of_link.ok()) << of_link.status();
  fs::remove_all(full);  // best/ needs no link of the chain
  absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(best_dir.string());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->chain.size(), 1u);
  EXPECT_EQ(report->global_step, common::ReadManifest(link)->global_step());
  absl::StatusOr<common::ExportResult> of_best =
      common::ExportSafetensors(best_dir.string(), dir_ + "/best.safetensors", slots);
  ASSERT_TRUE(of_best.ok()) << of_best.status();
  EXPECT_EQ(of_best->tensors, of_link->tensors);
  // The same tensors: the files' data past their headers (which name the
  // checkpoint) are equal.
  auto data = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t header = 0;
    if (bytes.size() >= sizeof(header)) std::memcpy(&header, bytes.data(), sizeof(header));
    return bytes.size() >= sizeof(header) + header ? bytes.substr(sizeof(header) + header) : "";
  };
  EXPECT_FALSE(data(dir_ + "/best.safetensors").empty());
  EXPECT_EQ(data(dir_ + "/best.safetensors"), data(dir_ + "/link.safetensors"));
}

TEST_F(EvaluatorTest, SessionReportsEveryCheckpointAndEndsAfterTheFinalOne) {
  auto chief_owned = std::make_unique<FakeChief>();
  FakeChief* chief = chief_owned.get();
  chief->Set(proto::PHASE_RUNNING, 0);
  EvaluatorOptions options;
  options.checkpoint_dir = dir_;
  options.summary_dir = dir_ + "/tb";
  options.poll_interval = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<EvaluatorSession>> session =
      EvaluatorSession::Create(options, std::move(chief_owned));
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<std::string> saved = {TrainAndSave(2, 1), TrainAndSave(2, 2)};
  // A corrupt one in between: reported, passed over.
  const std::string bad = TrainAndSave(1);
  fs::resize_file(fs::path(bad) / common::ShardFileName(0, kNumPs), 10);
  saved.push_back(TrainAndSave(2, 3));
  chief->Set(proto::PHASE_RUNNING, version_);  // the last one is final
  std::vector<std::string> evaluated;
  for (;;) {
    absl::StatusOr<std::optional<FoundCheckpoint>> next = (*session)->Next(stop_);
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    evaluated.push_back((*next)->path);
    ASSERT_TRUE((*session)->Report(**next, {{"test_accuracy", 0.1 * evaluated.size()}}).ok());
  }
  EXPECT_EQ(evaluated, saved);
  const std::vector<proto::EvaluationReport> reports = chief->reports();
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[0].epochs_completed(), 1);
  EXPECT_TRUE(reports[0].best());
  EXPECT_EQ(reports[2].checkpoint(), fs::path(bad).filename().string());
  EXPECT_NE(reports[2].error().find("shard-0-of-2"), std::string::npos) << reports[2].error();
  EXPECT_TRUE(reports[2].metrics().empty());
  EXPECT_EQ(reports[3].global_step(), version_);
  EXPECT_TRUE(reports[3].best());
  EXPECT_FALSE(fs::is_empty(dir_ + "/tb/eval"));
  // A bad metric is refused before anything is written.
  FoundCheckpoint any;
  any.name = "ckpt-1";
  EXPECT_EQ((*session)->Report(any, {{"x", std::nan("")}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EvaluatorTest, ARestartedSessionGoesOnAfterWhatTheChiefHasReports) {
  const std::string first = TrainAndSave(2);
  const std::string second = TrainAndSave(2);
  const std::string third = TrainAndSave(2);
  auto chief_owned = std::make_unique<FakeChief>();
  FakeChief* chief = chief_owned.get();
  chief->Set(proto::PHASE_RUNNING, version_);
  chief->SetReported(0, common::ReadManifest(second)->global_step());
  chief->SetReported(1, version_);  // another evaluator's reports do not count
  EvaluatorOptions options;
  options.checkpoint_dir = dir_;
  options.poll_interval = absl::Milliseconds(5);
  std::unique_ptr<EvaluatorSession> session =
      *EvaluatorSession::Create(options, std::move(chief_owned));
  absl::StatusOr<std::optional<FoundCheckpoint>> next = session->Next(stop_);
  ASSERT_TRUE(next.ok() && next->has_value()) << next.status();
  EXPECT_EQ((*next)->path, third);
  ASSERT_TRUE(session->Report(**next, {{"accuracy", 0.5}}).ok());
  next = session->Next(stop_);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->has_value());  // the final one was the third
}

TEST_F(EvaluatorTest, SessionGivesUpClearlyWhenTheDirectoryNeverAppears) {
  auto chief_owned = std::make_unique<FakeChief>();
  FakeChief* chief = chief_owned.get();
  chief->Set(proto::PHASE_RUNNING, 0);
  EvaluatorOptions options;
  options.checkpoint_dir = dir_ + "/elsewhere";
  options.poll_interval = absl::Milliseconds(5);
  std::unique_ptr<EvaluatorSession> session =
      *EvaluatorSession::Create(options, std::move(chief_owned));
  // While the job runs, a missing directory is waited for; once the final
  // checkpoint is saved, it is an error that says where it looked.
  std::thread finish([&] {
    absl::SleepFor(absl::Milliseconds(50));
    chief->Set(proto::PHASE_RUNNING, 40);
  });
  absl::StatusOr<std::optional<FoundCheckpoint>> next = session->Next(stop_);
  finish.join();
  ASSERT_EQ(next.status().code(), absl::StatusCode::kNotFound) << next.status();
  EXPECT_NE(next.status().message().find(options.checkpoint_dir), std::string::npos);
  const std::vector<proto::EvaluationReport> reports = chief->reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].fatal());
  EXPECT_NE(reports[0].error().find("does not exist"), std::string::npos);
  EXPECT_FALSE(EvaluatorSession::Create(EvaluatorOptions(), std::make_unique<FakeChief>()).ok());
}

TEST_F(EvaluatorTest, SessionGivesUpWhenTheChiefStaysAway) {
  auto chief_owned = std::make_unique<FakeChief>();
  chief_owned->SetDown(true);
  EvaluatorOptions options;
  options.checkpoint_dir = dir_;
  options.poll_interval = absl::Milliseconds(5);
  options.chief_timeout = absl::Milliseconds(50);
  std::unique_ptr<EvaluatorSession> session =
      *EvaluatorSession::Create(options, std::move(chief_owned));
  absl::StatusOr<std::optional<FoundCheckpoint>> next = session->Next(stop_);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable) << next.status();
}

TEST_F(EvaluatorTest, BuiltinEvaluationOfARestoredCheckpointScoresWhatTheLivePsScore) {
  if (!fs::exists(kFashionMnist)) {
    GTEST_SKIP() << kFashionMnist << " is missing: install Debian's dataset-fashion-mnist";
  }
  const std::string saved = TrainAndSave(20, 1);
  CheckpointWatcher watcher(dir_);
  absl::StatusOr<std::optional<FoundCheckpoint>> found = watcher.Next();
  ASSERT_TRUE(found.ok() && found->has_value());
  BuiltinEvaluation evaluation(kFashionMnist);
  absl::StatusOr<std::map<std::string, double>> metrics = evaluation.Evaluate(**found);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  // The same model, evaluated over the two live ps that saved it.
  const models::Model* model = *models::ModelFor(options_.training);
  auto held_out = model->Load(options_.training, kFashionMnist, true, 0, 1);
  ASSERT_TRUE(held_out.ok());
  absl::StatusOr<models::ModelEvaluation> live =
      model->Evaluate(options_.training, **held_out, client_.get());
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_FALSE(live->metrics.empty());
  for (const auto& [name, value] : live->metrics) {
    ASSERT_EQ(metrics->count(name), 1u) << name;
    EXPECT_DOUBLE_EQ(metrics->at(name), value) << name;
  }
  // A model it cannot compute is refused by name.
  FoundCheckpoint spec = **found;
  spec.manifest.mutable_training()->set_model("spec:/nowhere/model.json");
  EXPECT_FALSE(evaluation.Evaluate(spec).ok());
}

}  // namespace
}  // namespace pst::evaluator
