// Sparse logistic regression (--model=logreg): the classic parameter-server
// workload (the OSDI'14 parameter-server paper's). One weight per feature id
// in a table ("logreg/weights", [--buckets, 1], or a hash table when
// --buckets=0) and a bias; p = sigmoid(bias + sum_k w[id_k] * value_k).
// Data: libsvm lines, --data (a file, or "generate[:rows=,features=,seed=]").
// FTRL-Proximal on the ps by default. Evaluation: AUC and log-loss on the
// held-out tail (--eval_fraction).
//
// The batch gradient is the sum over its examples, not the mean: FTRL (and
// Adagrad) scale each coordinate's step by its own gradient history, so the
// sum keeps a rare feature's few updates from vanishing under
// --initial_accumulator, as per-example FTRL would.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/classifier_metrics.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "data/generated.h"
#include "data/libsvm.h"
#include "models/gradient_clip.h"
#include "models/model.h"
#include "models/model_spec.h"
#include "models/row_steps.h"
#include "models/streamed_data.h"

namespace pst::models {
namespace {

using common::Sigmoid;

constexpr char kWeights[] = "logreg/weights";
constexpr char kBias[] = "logreg/bias";

struct LibsvmData : ModelData {
  data::LibsvmDataset data;
  int64_t size() const override { return data.size; }
};

// A batch of examples gathered from a LibsvmDataset: its ids deduplicated
// (the rows to pull and push) and each feature's slot among them.
struct SparseBatch {
  std::vector<int64_t> ids, unique;
  std::vector<int32_t> slot;
  std::vector<float> values, labels;
  std::vector<int64_t> offsets;  // [n + 1] into ids/values
  client::Values rows;           // [unique, 1] once pulled

  void Gather(const data::LibsvmDataset& data, const int64_t* examples, int64_t n) {
    ids.clear();
    values.clear();
    labels.resize(n);
    offsets.assign(1, 0);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t e = examples[k];
      const int64_t begin = data.offsets[e], end = data.offsets[e + 1];
      ids.insert(ids.end(), data.ids.begin() + begin, data.ids.begin() + end);
      values.insert(values.end(), data.values.begin() + begin, data.values.begin() + end);
      offsets.push_back(static_cast<int64_t>(ids.size()));
      labels[k] = data.labels[e];
    }
    common::UniqueIds(ids.data(), static_cast<int64_t>(ids.size()), &unique, &slot);
  }
  std::vector<client::PsClient::TableIds> Tables() const { return {{kWeights, unique}}; }

  // The probabilities of the batch's n examples. REQUIRES: rows pulled.
  void Predict(float bias, std::vector<float>* probs) const {
    const int64_t n = static_cast<int64_t>(labels.size());
    probs->resize(n);
    const float* w = rows[0].data();
    for (int64_t i = 0; i < n; ++i) {
      float z = bias;
      for (int64_t k = offsets[i]; k < offsets[i + 1]; ++k) z += w[slot[k]] * values[k];
      (*probs)[i] = Sigmoid(z);
    }
  }
};

class Logreg : public Model {
 public:
  std::string_view name() const override { return "logreg"; }
  std::string_view default_optimizer() const override { return "ftrl"; }
  double default_learning_rate() const override { return 0.05; }
  bool reads_data_file() const override { return true; }

  absl::StatusOr<std::string> PrepareData(const std::string& data) const override {
    PST_ASSIGN_OR_RETURN(auto settings,
                         data::ParseGenerateSpec(data, {"rows", "features", "seed"}));
    if (!settings.has_value()) return data;
    data::SyntheticLibsvmConfig config;
    if (settings->contains("rows")) config.rows = settings->at("rows");
    if (settings->contains("features")) config.features = settings->at("features");
    if (settings->contains("seed")) config.seed = static_cast<uint64_t>(settings->at("seed"));
    return data::GenerateOnce(
        absl::StrCat("pstrain_libsvm_r", config.rows, "_f", config.features, "_s", config.seed,
                     ".svm"),
        [&](const std::string& partial) -> absl::StatusOr<std::string> {
          PST_ASSIGN_OR_RETURN(data::SyntheticLibsvmStats stats,
                               data::WriteSyntheticLibsvm(partial, config));
          return absl::StrFormat(
              "%d rows, %.1f%% positive, best achievable AUC %.4f (%.4f on the last 10%%)",
              stats.rows, 100 * stats.positive_rate, stats.best_auc, stats.best_auc_tail);
        });
  }

  absl::Status CheckConfig(const proto::TrainingConfig& training) const override {
    if (training.buckets() < 0) return absl::InvalidArgumentError("buckets must be >= 0");
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<ModelVariable>> Variables(
      const proto::TrainingConfig& training) const override {
    PST_RETURN_IF_ERROR(CheckConfig(training));
    ModelVariable weights;
    weights.table = true;
    weights.spec.set_name(kWeights);
    weights.spec.set_dtype(proto::DT_FLOAT32);
    weights.spec.add_shape(training.buckets());  // 0: a hash table
    weights.spec.add_shape(1);
    weights.spec.mutable_initializer()->set_kind(proto::Initializer::ZEROS);
    if (training.buckets() == 0) weights.spec.set_admit_after(training.admit_after());
    std::vector<ModelVariable> vars = {weights};
    ParamSpec bias;
    bias.name = kBias;
    bias.shape = {1};
    std::vector<ModelVariable> dense = DenseVariables({bias}, training.seed());
    vars.insert(vars.end(), dense.begin(), dense.end());
    return vars;
  }

  absl::StatusOr<std::unique_ptr<ModelData>> Load(const proto::TrainingConfig& training,
                                                  const std::string& data_dir, bool held_out,
                                                  int shard, int num_shards) const override {
    if (LoadsStreamed(training, held_out)) {
      if (training.data().empty() && !held_out) {
        return absl::InvalidArgumentError("the logreg model needs --data=<libsvm input>");
      }
      return LoadStreamed(training, held_out, shard, num_shards, data::ExampleFormat::kLibsvm,
                          training.buckets());
    }
    auto loaded = std::make_unique<LibsvmData>();
    PST_ASSIGN_OR_RETURN(loaded->data, data::LoadLibsvmSplit(training, training.buckets(), held_out,
                                                             shard, num_shards));
    return loaded;
  }

  absl::StatusOr<int64_t> Train(const proto::TrainingConfig& training, const ModelData& data,
                                uint64_t shuffle_seed, client::PsClient* ps,
                                const LoopControl& control) const override {
    PST_ASSIGN_OR_RETURN(const LoadedOrStreamedData<LibsvmData> svm,
                         LoadedOrStreamed<LibsvmData>(data, name()));
    // Two slots of batch memory: with --overlap one batch computes while
    // the other's gradients are pushed (row_steps.h).
    std::array<SparseBatch, 2> batch;
    std::array<client::Values, 2> grads = {client::Values(1, std::vector<float>(1)),
                                           client::Values(1, std::vector<float>(1))};
    std::array<client::Values, 2> row_grads = {client::Values(1), client::Values(1)};
    std::vector<float> probs;
    RowStepFns<data::LibsvmDataset> fns;
    fns.gather = [&](int s, const data::LibsvmDataset& source, const int64_t* examples,
                     int64_t n) {
      batch[s].Gather(source, examples, n);
      return batch[s].Tables();
    };
    fns.rows = [&](int s) { return &batch[s].rows; };
    fns.compute = [&](int s, const client::Values& params) -> absl::StatusOr<float> {
      const SparseBatch& b = batch[s];
      const int64_t n = static_cast<int64_t>(b.labels.size());
      b.Predict(params[0][0], &probs);
      // Loss: the batch's mean log-loss. Gradients: sums (see the top).
      double loss = 0;
      float dbias = 0;
      std::vector<float>& rows = row_grads[s][0];
      rows.assign(b.unique.size(), 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        const float p = std::clamp(probs[i], 1e-7f, 1 - 1e-7f);
        loss -= b.labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
        const float dz = probs[i] - b.labels[i];
        dbias += dz;
        for (int64_t k = b.offsets[i]; k < b.offsets[i + 1]; ++k) {
          rows[b.slot[k]] += dz * b.values[k];
        }
      }
      grads[s][0][0] = dbias;
      ClipByGlobalNorm(training.clip_norm(), {&grads[s], &row_grads[s]});
      return static_cast<float>(loss / n);
    };
    fns.grads = [&](int s) { return &grads[s]; };
    fns.row_grads = [&](int s) { return &row_grads[s]; };
    return TrainRowSteps(training, svm, shuffle_seed, ps, control, data::OpenLibsvmAt, fns);
  }

  bool Overlaps(const proto::TrainingConfig& training) const override {
    return RowStepsOverlap(training);
  }

  absl::StatusOr<ModelEvaluation> Evaluate(const proto::TrainingConfig& training,
                                           const ModelData& held_out,
                                           client::PsClient* ps) const override {
    PST_ASSIGN_OR_RETURN(const LoadedOrStreamedData<LibsvmData> svm,
                         LoadedOrStreamed<LibsvmData>(held_out, name()));
    client::Values params;
    PST_ASSIGN_OR_RETURN(const int64_t global_step, ps->Pull(&params));
    SparseBatch batch;
    std::vector<float> probs, all_probs, all_labels;
    auto score = [&](const data::LibsvmDataset& source, const int64_t* examples,
                     int64_t n) -> absl::Status {
      batch.Gather(source, examples, n);
      PST_RETURN_IF_ERROR(ps->PullRows(batch.Tables(), &batch.rows));
      batch.Predict(params[0][0], &probs);
      all_probs.insert(all_probs.end(), probs.begin(), probs.end());
      for (int64_t i = 0; i < n; ++i) all_labels.push_back(source.labels[examples[i]]);
      return absl::OkStatus();
    };
    PST_RETURN_IF_ERROR(ForEachHeldOutChunk(svm, data::OpenLibsvmAt, score));
    return ClassifierEvaluation(all_probs, all_labels, global_step);
  }
};

}  // namespace

const Model& LogregModel() {
  static const Logreg model;
  return model;
}

}  // namespace pst::models
