// --stream_data and --eval_data through the models that read --data
// (logreg, wide_deep), in one process against in-process ps: a streamed
// share trains from any data position exactly as without the stop, the
// held-out set streamed scores as the same examples loaded, the shares
// add up, and bad or changed input is refused with an error that names it.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "data/criteo.h"
#include "data/libsvm.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/train_loop.h"
#include "tests/in_process_ps.h"

namespace pst::models {
namespace {

void WriteFile(const std::string& path, const std::string& text) {
  if (path.ends_with(".gz")) {
    gzFile gz = gzopen(path.c_str(), "wb");
    ASSERT_NE(gz, nullptr) << path;
    ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
              static_cast<int>(text.size()));
    ASSERT_EQ(gzclose(gz), Z_OK);
  } else {
    std::ofstream(path) << text;
  }
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Join(const std::vector<std::string>& lines, size_t begin, size_t end) {
  std::string text;
  for (size_t i = begin; i < end; ++i) absl::StrAppend(&text, lines[i], "\n");
  return text;
}

class StreamedDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/streamed_data_test_", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/train");
    training_.set_batch_size(16);
    training_.set_epochs(2);
    training_.set_seed(3);
    training_.set_eval_fraction(0.5);
    training_.set_shuffle_buffer(37);
    training_.mutable_optimizer()->set_name("sgd");
    training_.mutable_optimizer()->set_learning_rate(0.1f);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Synthetic libsvm lines: 600 for training in a directory of three files
  // (two gzip, one plain), 300 more of them in eval.svm.
  void MakeLibsvm() {
    training_.set_model("logreg");
    data::SyntheticLibsvmConfig config;
    config.rows = 900;
    config.features = 50;
    config.nnz = 5;
    ASSERT_TRUE(data::WriteSyntheticLibsvm(dir_ + "/all.svm", config).ok());
    Split(dir_ + "/all.svm", 600, ".svm");
  }

  // Synthetic Criteo lines, split the same way.
  void MakeCriteo() {
    training_.set_model("wide_deep");
    training_.set_buckets_per_field(64);
    training_.set_embedding_dim(4);
    training_.add_hidden_units(8);
    data::SyntheticCriteoConfig config;
    config.rows = 900;
    config.vocab_per_field = 50;
    ASSERT_TRUE(data::WriteSyntheticCriteo(dir_ + "/all.tsv", config).ok());
    Split(dir_ + "/all.tsv", 600, ".tsv");
  }

  void Split(const std::string& all, size_t train, const std::string& ext) {
    lines_ = Lines(all);
    ASSERT_EQ(lines_.size(), 900u);
    WriteFile(dir_ + "/train/part-0" + ext + ".gz", Join(lines_, 0, 200));
    WriteFile(dir_ + "/train/part-1" + ext, Join(lines_, 200, 400));
    WriteFile(dir_ + "/train/part-2" + ext + ".gz", Join(lines_, 400, train));
    WriteFile(dir_ + "/eval" + ext, Join(lines_, train, lines_.size()));
    training_.set_stream_data(true);
    training_.set_data(dir_ + "/train");
    training_.set_eval_data(dir_ + "/eval" + ext);
  }

  const Model& model() const { return **FindModel(training_.model()); }

  std::unique_ptr<ModelData> Load(bool held_out, int shard = 0, int num_shards = 1) {
    absl::StatusOr<std::unique_ptr<ModelData>> data =
        model().Load(training_, "", held_out, shard, num_shards);
    EXPECT_TRUE(data.ok()) << data.status();
    return data.ok() ? *std::move(data) : nullptr;
  }

  // Trains `data` into `ps` from the start; with stop_at > 0 the loop is
  // stopped there and started again from it, as a worker does after a
  // hold or a restart. The positions the steps reported, in order.
  std::vector<int64_t> Train(const ModelData& data, client::PsClient* ps, int64_t stop_at) {
    std::vector<int64_t> positions;
    LoopControl control;
    control.on_step = [&](int64_t, float, int, int64_t, int64_t position) {
      positions.push_back(position);
    };
    const uint64_t seed = WorkerShuffleSeed(training_, 0);
    if (stop_at > 0) {
      control.should_stop = [&](int64_t position) { return position == stop_at; };
      EXPECT_TRUE(model().Train(training_, data, seed, ps, control).ok());
      EXPECT_EQ(positions.size(), static_cast<size_t>(stop_at));
      control.should_stop = [](int64_t) { return false; };
      control.start_position = stop_at;
    }
    absl::StatusOr<int64_t> trained = model().Train(training_, data, seed, ps, control);
    EXPECT_TRUE(trained.ok()) << trained.status();
    return positions;
  }

  // Every variable the ps hold: the dense ones and the rows of `ids` of
  // each table.
  client::Values Snapshot(client::PsClient* ps, const std::vector<int64_t>& ids) {
    client::Values dense, rows;
    EXPECT_TRUE(ps->Pull(&dense).ok());
    std::vector<client::PsClient::TableIds> tables;
    const std::vector<ModelVariable> variables = *model().Variables(training_);
    for (const ModelVariable& v : variables) {
      if (v.table) tables.push_back({v.spec.name(), ids});
    }
    EXPECT_TRUE(ps->PullRows(tables, &rows).ok());
    dense.insert(dense.end(), rows.begin(), rows.end());
    return dense;
  }

  std::string dir_;
  std::vector<std::string> lines_;
  proto::TrainingConfig training_;
};

TEST_F(StreamedDataTest, Logreg_StoppedAtAnyPosition_EndsBitForBitAsUninterrupted) {
  MakeLibsvm();
  std::unique_ptr<ModelData> data = Load(false);
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(data->size(), 600);
  // The table's rows: every feature id of the data.
  absl::StatusOr<data::LibsvmDataset> all = data::ReadLibsvm(dir_ + "/all.svm", {});
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<int64_t> ids = all->ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  ASSERT_GT(ids.size(), 10u);

  std::unique_ptr<client::PsClient> reference = testing::InProcessModelCluster(training_, 2);
  const std::vector<int64_t> positions = Train(*data, reference.get(), 0);
  // 600 examples in batches of 16: 38 an epoch (the last of 8), 2 epochs.
  ASSERT_EQ(positions.size(), 76u);
  for (size_t i = 0; i < positions.size(); ++i) EXPECT_EQ(positions[i], int64_t(i) + 1);
  const client::Values expected = Snapshot(reference.get(), ids);

  // Inside the first block, across blocks, at the epoch's end, mid second epoch.
  for (int64_t stop_at : {1, 5, 37, 38, 50}) {
    SCOPED_TRACE(stop_at);
    std::unique_ptr<client::PsClient> ps = testing::InProcessModelCluster(training_, 2);
    EXPECT_EQ(Train(*data, ps.get(), stop_at), positions);
    EXPECT_EQ(Snapshot(ps.get(), ids), expected);
  }

  // Another seed trains on other batches: the stream is shuffled.
  training_.set_seed(4);
  std::unique_ptr<client::PsClient> other = testing::InProcessModelCluster(training_, 2);
  Train(*data, other.get(), 0);
  training_.set_seed(3);
  EXPECT_NE(Snapshot(other.get(), ids), expected);
}

TEST_F(StreamedDataTest, WideDeep_StoppedMidEpoch_EndsBitForBitAsUninterrupted) {
  MakeCriteo();
  std::unique_ptr<ModelData> data = Load(false);
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(data->size(), 600);
  std::vector<int64_t> ids(26 * 64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  std::unique_ptr<client::PsClient> reference = testing::InProcessModelCluster(training_, 2);
  const std::vector<int64_t> positions = Train(*data, reference.get(), 0);
  ASSERT_EQ(positions.size(), 76u);
  std::unique_ptr<client::PsClient> ps = testing::InProcessModelCluster(training_, 2);
  EXPECT_EQ(Train(*data, ps.get(), 45), positions);
  EXPECT_EQ(Snapshot(ps.get(), ids), Snapshot(reference.get(), ids));
}

// --overlap for the models with tables (models/row_steps.h): every batch
// is still pushed once, in order, also across a stop; a step computes from
// values one step older, so the result differs from the plain loop's; a
// max_steps stop counts the step computed and not yet pushed; sync mode
// does not overlap and trains bit for bit as without the flag.
void ExpectOverlapKeepsEveryBatchOnce(const ModelData& data,
                                      const std::vector<int64_t>& ids,
                                      proto::TrainingConfig* training) {
  auto run = [&](const proto::TrainingConfig& config, int64_t stop_at,
                 std::vector<int64_t>* versions) {
    std::unique_ptr<client::PsClient> ps = testing::InProcessModelCluster(config, 2);
    const Model& model = **FindModel(config.model());
    std::vector<int64_t> positions;
    LoopControl control;
    control.on_step = [&](int64_t, float, int, int64_t version, int64_t position) {
      positions.push_back(position);
      if (versions != nullptr) versions->push_back(version);
    };
    const uint64_t seed = WorkerShuffleSeed(config, 0);
    if (stop_at > 0) {
      control.should_stop = [&](int64_t position) { return position == stop_at; };
      absl::StatusOr<int64_t> first = model.Train(config, data, seed, ps.get(), control);
      EXPECT_TRUE(first.ok()) << first.status();
      EXPECT_EQ(positions.size(), static_cast<size_t>(stop_at));
      control.should_stop = [](int64_t) { return false; };
      control.start_position = stop_at;
    }
    absl::StatusOr<int64_t> trained = model.Train(config, data, seed, ps.get(), control);
    EXPECT_TRUE(trained.ok()) << trained.status();
    client::Values dense, rows;
    EXPECT_TRUE(ps->Pull(&dense).ok());
    std::vector<client::PsClient::TableIds> tables;
    const std::vector<ModelVariable> variables = *model.Variables(config);
    for (const ModelVariable& v : variables) {
      if (v.table) tables.push_back({v.spec.name(), ids});
    }
    EXPECT_TRUE(ps->PullRows(tables, &rows).ok());
    dense.insert(dense.end(), rows.begin(), rows.end());
    return std::make_pair(positions, dense);
  };
  std::vector<int64_t> in_order(76);
  for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = static_cast<int64_t>(i) + 1;
  const auto plain = run(*training, 0, nullptr);
  ASSERT_EQ(plain.first, in_order);

  proto::TrainingConfig overlapped = *training;
  overlapped.set_overlap(true);
  ASSERT_TRUE((*FindModel(overlapped.model()))->Overlaps(overlapped));
  std::vector<int64_t> versions;
  const auto piped = run(overlapped, 0, &versions);
  EXPECT_EQ(piped.first, in_order);
  EXPECT_EQ(versions, in_order) << "one worker: each push one version";
  EXPECT_NE(piped.second, plain.second) << "the overlapped steps computed from older values";
  // Stopped mid-epoch and started again: still every batch once.
  EXPECT_EQ(run(overlapped, 37, nullptr).first, in_order);

  proto::TrainingConfig capped = overlapped;
  capped.set_max_steps(10);
  std::vector<int64_t> capped_versions;
  run(capped, 0, &capped_versions);
  EXPECT_EQ(capped_versions, std::vector<int64_t>(in_order.begin(), in_order.begin() + 10));

  proto::TrainingConfig sync = overlapped;
  sync.mutable_sync()->set_mode(proto::SYNC);
  sync.mutable_sync()->set_num_workers(1);
  sync.mutable_sync()->set_replicas_to_aggregate(1);
  EXPECT_FALSE((*FindModel(sync.model()))->Overlaps(sync));
  proto::TrainingConfig sync_plain = sync;
  sync_plain.set_overlap(false);
  EXPECT_EQ(run(sync, 0, nullptr).second, run(sync_plain, 0, nullptr).second);
}

TEST_F(StreamedDataTest, Logreg_Overlap_EveryBatchPushedOnce_FromValuesOneStepOlder) {
  MakeLibsvm();
  std::unique_ptr<ModelData> data = Load(false);
  ASSERT_NE(data, nullptr);
  absl::StatusOr<data::LibsvmDataset> all = data::ReadLibsvm(dir_ + "/all.svm", {});
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<int64_t> ids = all->ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  ExpectOverlapKeepsEveryBatchOnce(*data, ids, &training_);
}

TEST_F(StreamedDataTest, WideDeep_Overlap_EveryBatchPushedOnce_FromValuesOneStepOlder) {
  MakeCriteo();
  std::unique_ptr<ModelData> data = Load(false);
  ASSERT_NE(data, nullptr);
  std::vector<int64_t> ids(26 * 64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  ExpectOverlapKeepsEveryBatchOnce(*data, ids, &training_);
}

// The held-out set streamed from --eval_data scores exactly as the same
// examples loaded as --data's held-out tail.
TEST_F(StreamedDataTest, HeldOutStreamed_ScoresAsTheSameExamplesLoaded) {
  for (const bool criteo : {false, true}) {
    SCOPED_TRACE(criteo ? "wide_deep" : "logreg");
    training_ = proto::TrainingConfig();
    SetUp();
    if (criteo) {
      MakeCriteo();
    } else {
      MakeLibsvm();
    }
    std::unique_ptr<ModelData> train = Load(false);
    ASSERT_NE(train, nullptr);
    std::unique_ptr<client::PsClient> ps = testing::InProcessModelCluster(training_, 2);
    Train(*train, ps.get(), 0);
    std::unique_ptr<ModelData> streamed = Load(true);
    ASSERT_NE(streamed, nullptr);
    EXPECT_EQ(streamed->size(), 300);
    absl::StatusOr<ModelEvaluation> a = model().Evaluate(training_, *streamed, ps.get());
    ASSERT_TRUE(a.ok()) << a.status();

    // The whole file loaded, its last third held out: the same 300 lines.
    training_.set_stream_data(false);
    training_.set_eval_data("");
    training_.set_data(dir_ + (criteo ? "/all.tsv" : "/all.svm"));
    training_.set_eval_fraction(1.0 / 3);
    std::unique_ptr<ModelData> loaded = Load(true);
    ASSERT_NE(loaded, nullptr);
    ASSERT_EQ(loaded->size(), 300);
    absl::StatusOr<ModelEvaluation> b = model().Evaluate(training_, *loaded, ps.get());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->metrics, b->metrics);
    EXPECT_EQ(a->counts, b->counts);
    EXPECT_EQ(a->counts, (std::vector<std::pair<std::string, int64_t>>{{"test_examples", 300}}));
  }
}

TEST_F(StreamedDataTest, Shares_OfADirectoryAndOfOneFile_AddUpToEveryExample) {
  MakeLibsvm();
  for (const std::string& input : {dir_ + "/train", dir_ + "/all.svm", dir_ + "/train/part-*"}) {
    training_.set_data(input);
    const int64_t total = input.ends_with("all.svm") ? 900 : 600;
    for (int workers = 1; workers <= 3; ++workers) {
      int64_t sum = 0;
      for (int w = 0; w < workers; ++w) {
        std::unique_ptr<ModelData> share = Load(false, w, workers);
        ASSERT_NE(share, nullptr);
        EXPECT_GT(share->size(), 0);
        sum += share->size();
      }
      EXPECT_EQ(sum, total) << input << " over " << workers;
    }
  }
}

// --eval_data beside a --data loaded whole: nothing of --data is held out.
TEST_F(StreamedDataTest, EvalDataWithLoadedData_NothingOfDataHeldOut) {
  MakeLibsvm();
  training_.set_stream_data(false);
  training_.set_data(dir_ + "/all.svm");
  std::unique_ptr<ModelData> train = Load(false);
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), 900);
  std::unique_ptr<ModelData> held_out = Load(true);
  ASSERT_NE(held_out, nullptr);
  EXPECT_EQ(held_out->size(), 300);  // eval.svm, streamed
}

TEST_F(StreamedDataTest, BadLine_RefusedAtLoadNamingTheFileAndLine) {
  MakeLibsvm();
  std::vector<std::string> lines = Lines(dir_ + "/train/part-1.svm");
  lines[7] = "1 5:oops";
  WriteFile(dir_ + "/train/part-1.svm", Join(lines, 0, lines.size()));
  absl::StatusOr<std::unique_ptr<ModelData>> data = model().Load(training_, "", false, 0, 1);
  ASSERT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
  EXPECT_NE(data.status().message().find("part-1.svm:8"), std::string::npos)
      << data.status().message();
  EXPECT_NE(data.status().message().find("oops"), std::string::npos) << data.status().message();
}

// A file cut short after the examples were counted: training stops with
// DataLoss saying so, not with a short epoch that would shift every later
// data position.
TEST_F(StreamedDataTest, InputShrankAfterLoad_DataLoss) {
  MakeLibsvm();
  std::unique_ptr<ModelData> data = Load(false);
  ASSERT_NE(data, nullptr);
  std::vector<std::string> lines = Lines(dir_ + "/train/part-1.svm");
  WriteFile(dir_ + "/train/part-1.svm", Join(lines, 0, 150));
  std::unique_ptr<client::PsClient> ps = testing::InProcessModelCluster(training_, 1);
  absl::StatusOr<int64_t> trained =
      model().Train(training_, *data, WorkerShuffleSeed(training_, 0), ps.get(), LoopControl());
  ASSERT_EQ(trained.status().code(), absl::StatusCode::kDataLoss) << trained.status();
  EXPECT_NE(trained.status().message().find("counted"), std::string::npos)
      << trained.status().message();
}

}  // namespace
}  // namespace pst::models
