#include "models/wide_deep_model.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/generated.h"
#include "models/ctr_batch.h"
#include "models/device_wide_deep.h"
#include "models/gradient_clip.h"
#include "models/model_spec.h"
#include "models/row_steps.h"
#include "models/streamed_data.h"

namespace pst::models {
namespace {

struct CtrData : ModelData {
  data::CtrDataset data;
  int64_t size() const override { return data.size; }
};

class WideDeepCtr : public Model {
 public:
  std::string_view name() const override { return "wide_deep"; }
  std::string_view default_hidden() const override { return "64,32"; }
  bool reads_data_file() const override { return true; }

  absl::StatusOr<std::string> PrepareData(const std::string& data) const override {
    PST_ASSIGN_OR_RETURN(auto settings, data::ParseGenerateSpec(data, {"rows", "vocab", "seed"}));
    if (!settings.has_value()) return data;
    data::SyntheticCriteoConfig config;
    config.rows = 200000;
    config.vocab_per_field = 10000;
    if (settings->contains("rows")) config.rows = settings->at("rows");
    if (settings->contains("vocab")) config.vocab_per_field = settings->at("vocab");
    if (settings->contains("seed")) config.seed = static_cast<uint64_t>(settings->at("seed"));
    return data::GenerateOnce(
        absl::StrCat("pstrain_criteo_r", config.rows, "_v", config.vocab_per_field, "_s",
                     config.seed, ".tsv"),
        [&](const std::string& partial) -> absl::StatusOr<std::string> {
          PST_ASSIGN_OR_RETURN(data::SyntheticCriteoStats stats,
                               data::WriteSyntheticCriteo(partial, config));
          return absl::StrFormat("%d rows, %.1f%% positive, best achievable AUC %.4f", stats.rows,
                                 100 * stats.positive_rate, stats.best_auc);
        });
  }

  absl::Status CheckConfig(const proto::TrainingConfig& training) const override {
    if (training.buckets_per_field() < 0) {
      return absl::InvalidArgumentError("buckets_per_field must be >= 0");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<ModelVariable>> Variables(
      const proto::TrainingConfig& training) const override {
    PST_ASSIGN_OR_RETURN(WideDeepConfig wd, WideDeepConfigFor(training));
    PST_RETURN_IF_ERROR(CheckConfig(training));
    const int64_t buckets = training.buckets_per_field();
    const int64_t rows = buckets * data::kCriteoFields;
    std::vector<ModelVariable> vars;
    for (const char* name : {kDeepEmbedding, kWideEmbedding}) {
      const bool deep = name == std::string(kDeepEmbedding);
      ModelVariable table;
      table.table = true;
      proto::VariableSpec& spec = table.spec;
      spec.set_name(name);
      spec.set_dtype(proto::DT_FLOAT32);
      spec.add_shape(rows);
      spec.add_shape(deep ? wd.embedding_dim : 1);
      if (deep) {
        spec.mutable_initializer()->set_kind(proto::Initializer::UNIFORM);
        spec.mutable_initializer()->set_scale(0.05f);
        spec.mutable_initializer()->set_seed(training.seed() * 1000003u + 7777);
      }
      if (buckets == 0) spec.set_admit_after(training.admit_after());
      vars.push_back(std::move(table));
    }
    std::vector<ModelVariable> dense = DenseVariables(WideDeepDenseSpecs(wd), training.seed());
    vars.insert(vars.end(), dense.begin(), dense.end());
    return vars;
  }

  absl::StatusOr<std::unique_ptr<ModelData>> Load(const proto::TrainingConfig& training,
                                                  const std::string& data_dir, bool held_out,
                                                  int shard, int num_shards) const override {
    if (LoadsStreamed(training, held_out)) {
      if (training.data().empty() && !held_out) {
        return absl::InvalidArgumentError("the wide_deep model needs --data=<Criteo-format input>");
      }
      return LoadStreamed(training, held_out, shard, num_shards, data::ExampleFormat::kCriteo,
                          training.buckets_per_field());
    }
    auto loaded = std::make_unique<CtrData>();
    PST_ASSIGN_OR_RETURN(loaded->data, data::LoadCtrSplit(training, held_out, shard, num_shards));
    return loaded;
  }

  absl::StatusOr<int64_t> Train(const proto::TrainingConfig& training, const ModelData& data,
                                uint64_t shuffle_seed, client::PsClient* ps,
                                const LoopControl& control) const override {
    return TrainWideDeep(training, data, shuffle_seed, ps, control);
  }

  bool Overlaps(const proto::TrainingConfig& training) const override {
    return RowStepsOverlap(training);
  }

  absl::StatusOr<ModelEvaluation> Evaluate(const proto::TrainingConfig& training,
                                           const ModelData& held_out,
                                           client::PsClient* ps) const override {
    return EvaluateWideDeep(training, held_out, ps);
  }
};

}  // namespace

const Model& WideDeepModel() {
  static const WideDeepCtr model;
  return model;
}

absl::StatusOr<WideDeepConfig> WideDeepConfigFor(const proto::TrainingConfig& training) {
  WideDeepConfig config;
  config.num_dense = data::kCriteoDense;
  config.num_fields = data::kCriteoFields;
  config.embedding_dim = training.embedding_dim();
  config.hidden.assign(training.hidden_units().begin(), training.hidden_units().end());
  if (config.embedding_dim < 1) return absl::InvalidArgumentError("embedding_dim must be >= 1");
  for (int units : config.hidden) {
    if (units < 1) return absl::InvalidArgumentError("hidden layer widths must be positive");
  }
  return config;
}

absl::StatusOr<int64_t> TrainWideDeep(const proto::TrainingConfig& training,
                                      const ModelData& data, uint64_t shuffle_seed,
                                      client::PsClient* ps, const LoopControl& control) {
  PST_ASSIGN_OR_RETURN(const LoadedOrStreamedData<CtrData> ctr,
                       LoadedOrStreamed<CtrData>(data, "wide_deep"));
  PST_ASSIGN_OR_RETURN(WideDeepConfig config, WideDeepConfigFor(training));
  // As TrainMlp: the reference model on one CPU device, MirroredWideDeep
  // on any other set of devices.
  const bool host_only = HostOnly(control.devices);
  std::optional<WideDeep> host_model;
  std::optional<MirroredWideDeep> mirrored;
  if (host_only) host_model.emplace(config);
  if (!host_only || control.log_device_placement) {
    std::vector<device::Device*> devices = control.devices;
    if (devices.empty()) devices.push_back(DefaultCpuDevice());
    mirrored.emplace(config, devices);
  }
  if (control.log_device_placement) {
    for (const std::string& line : mirrored->DevicePlacement(control.job_prefix)) {
      spdlog::info("{}", line);
    }
  }
  // Two slots of batch memory: with --overlap one batch computes while the
  // other's gradients are pushed (row_steps.h).
  std::array<CtrBatchData, 2> batch;
  std::array<client::Values, 2> grads, row_grads = {client::Values(2), client::Values(2)};
  RowStepFns<data::CtrDataset> fns;
  fns.gather = [&](int s, const data::CtrDataset& source, const int64_t* examples, int64_t n) {
    batch[s].Gather(source, examples, n);
    return batch[s].Tables();
  };
  fns.rows = [&](int s) { return &batch[s].rows; };
  fns.compute = [&](int s, const client::Values& params) -> absl::StatusOr<float> {
    const CtrBatch view = batch[s].View(static_cast<int64_t>(batch[s].labels.size()));
    PST_ASSIGN_OR_RETURN(const float loss,
                         host_only ? host_model->LossAndGradients(params, view, &grads[s],
                                                                  &row_grads[s][0],
                                                                  &row_grads[s][1])
                                   : mirrored->LossAndGradients(params, view, &grads[s],
                                                                &row_grads[s][0],
                                                                &row_grads[s][1]));
    // The whole gradient, rows and dense, before any of it is pushed.
    ClipByGlobalNorm(training.clip_norm(), {&grads[s], &row_grads[s]});
    return loss;
  };
  fns.grads = [&](int s) { return &grads[s]; };
  fns.row_grads = [&](int s) { return &row_grads[s]; };
  return TrainRowSteps(training, ctr, shuffle_seed, ps, control, data::OpenCtrAt, fns);
}

absl::StatusOr<ModelEvaluation> EvaluateWideDeep(const proto::TrainingConfig& training,
                                                 const ModelData& data,
                                                 client::PsClient* ps) {
  PST_ASSIGN_OR_RETURN(const LoadedOrStreamedData<CtrData> ctr,
                       LoadedOrStreamed<CtrData>(data, "wide_deep"));
  PST_ASSIGN_OR_RETURN(WideDeepConfig config, WideDeepConfigFor(training));
  WideDeep model(config);
  client::Values params;
  PST_ASSIGN_OR_RETURN(const int64_t version, ps->Pull(&params));
  CtrBatchData batch;
  std::vector<float> probs, all_probs, all_labels;
  auto score = [&](const data::CtrDataset& source, const int64_t* examples,
                   int64_t n) -> absl::Status {
    batch.Gather(source, examples, n);
    PST_RETURN_IF_ERROR(ps->PullRows(batch.Tables(), &batch.rows));
    PST_RETURN_IF_ERROR(model.Predict(params, batch.View(n), &probs));
    all_probs.insert(all_probs.end(), probs.begin(), probs.end());
    for (int64_t i = 0; i < n; ++i) all_labels.push_back(source.labels[examples[i]]);
    return absl::OkStatus();
  };
  PST_RETURN_IF_ERROR(ForEachHeldOutChunk(ctr, data::OpenCtrAt, score));
  return ClassifierEvaluation(all_probs, all_labels, version);
}

}  // namespace pst::models
