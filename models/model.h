// The Model interface: everything pstrain needs to know of a model, behind
// one class, so that the chief, the worker and the tools never name one.
// A model states
// - its variables (specs, initializers, which of them are tables);
// - how it reads its data, and how it prepares a generated data set;
// - its training loop: batches, forward and backward passes on the given
//   devices, pushes and pulls through a PsClient;
// - its evaluation metrics.
// Models are stateless singletons found through the registry
// (models/registry.h); each lives in one file (models/<name>_model.cc).
// Thread-safe: every method is const and keeps no state.
#ifndef PST_MODELS_MODEL_H_
#define PST_MODELS_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "models/train_loop.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

struct ModelVariable {
  proto::VariableSpec spec;  // the whole, logical variable
  bool table = false;        // read and updated by rows; partitioned
};

// Data a model has loaded: one worker's shard, or the held-out set.
// Immutable once loaded, so safe to read from any thread.
class ModelData {
 public:
  virtual ~ModelData() = default;
  virtual int64_t size() const = 0;  // examples
};

// A model's evaluation on its held-out data.
struct ModelEvaluation {
  // In the order shown, e.g. {"test_accuracy", 0.87}, {"test_loss", 0.36}.
  std::vector<std::pair<std::string, double>> metrics;
  // Integer figures, e.g. {"test_examples", 20000}.
  std::vector<std::pair<std::string, int64_t>> counts;
  std::string line;         // the same, for a log line
  int64_t global_step = 0;  // the version of the dense variables evaluated
};

// The evaluation of a binary classifier: test_auc and test_logloss of
// `probs` against 0/1 `labels`, and test_examples.
ModelEvaluation ClassifierEvaluation(const std::vector<float>& probs,
                                     const std::vector<float>& labels, int64_t global_step);

class Model {
 public:
  virtual ~Model() = default;

  // The --model name.
  virtual std::string_view name() const = 0;
  // Whether --model names this model with a file: "<name>:FILE".
  virtual bool names_file() const { return false; }
  // Whether only workers of the user's own (--worker_command) compute this
  // model: pstrain plans, creates, checkpoints and restores its variables,
  // but its Load, Train and Evaluate fail FailedPrecondition, and the chief
  // evaluates nothing at the end.
  virtual bool computed_by_workers() const { return false; }
  // Fills in what the model reads from files the flags name (a spec model:
  // its variables, from the file of --model=spec:FILE), so that it travels
  // in the TrainingConfig to every task. Called once, where the flags are
  // read, before any other method. Errors: NotFound for a missing file;
  // InvalidArgument naming the file and what is wrong in it.
  virtual absl::Status ReadFiles(proto::TrainingConfig* training) const {
    return absl::OkStatus();
  }
  // The --hidden layer widths when the flag is empty ("" for none).
  virtual std::string_view default_hidden() const { return ""; }
  // The --optimizer when the flag is empty.
  virtual std::string_view default_optimizer() const { return "adam"; }
  // The --learning_rate when the flag is 0.
  virtual double default_learning_rate() const { return 0.001; }

  // Whether the model reads --data (a file every task can read, or
  // "generate[:key=value,...]") rather than --data_dir.
  virtual bool reads_data_file() const { return false; }
  // For reads_data_file(): `data` as a path. "generate[:...]" writes a
  // synthetic data set once (cached under $TMPDIR) and returns its path,
  // printing what was generated on stdout. Other values are returned as
  // they are. Errors: InvalidArgument naming a bad generate key or value.
  virtual absl::StatusOr<std::string> PrepareData(const std::string& data) const { return data; }

  // Settings this model cannot train with, beyond those every model checks.
  virtual absl::Status CheckConfig(const proto::TrainingConfig& training) const {
    return absl::OkStatus();
  }

  // The model's variables in creation order, with their initializers.
  // Errors: InvalidArgument for a setting of the model out of range.
  virtual absl::StatusOr<std::vector<ModelVariable>> Variables(
      const proto::TrainingConfig& training) const = 0;

  // Shard `shard` of `num_shards` of the training data (examples i with
  // i % num_shards == shard), or the held-out data (`held_out`; shard 0 of
  // 1). `data_dir` is --data_dir; training.data() is --data.
  // Errors: NotFound for missing data; InvalidArgument for malformed data.
  virtual absl::StatusOr<std::unique_ptr<ModelData>> Load(const proto::TrainingConfig& training,
                                                          const std::string& data_dir,
                                                          bool held_out, int shard,
                                                          int num_shards) const = 0;
  // The number of training examples when it is cheap to know (for the
  // chief's progress line); 0 when it is not.
  virtual int64_t CountTrainingExamples(const proto::TrainingConfig& training,
                                        const std::string& data_dir) const {
    return 0;
  }

  // Trains on `data` (from Load) through `ps`, from control.start_position,
  // until training.epochs() passes, training.max_steps() or
  // control.should_stop(). ASYNC and SSP pushes are tagged with the data
  // position, so a batch retried after a failure is applied at most once.
  // Returns the global step (the dense variables' version) at the end.
  // Errors: those of the ps calls, and InvalidArgument for data of
  // another model.
  virtual absl::StatusOr<int64_t> Train(const proto::TrainingConfig& training,
                                        const ModelData& data, uint64_t shuffle_seed,
                                        client::PsClient* ps, const LoopControl& control) const = 0;
  // Whether Train overlaps compute with communication under `training`.
  virtual bool Overlaps(const proto::TrainingConfig& training) const { return false; }

  // Scores the variables the ps hold now on `held_out` (from Load).
  virtual absl::StatusOr<ModelEvaluation> Evaluate(const proto::TrainingConfig& training,
                                                   const ModelData& held_out,
                                                   client::PsClient* ps) const = 0;
};

// The concrete data of a model, or InvalidArgument naming the model.
template <typename T>
absl::StatusOr<const T*> DataAs(const ModelData& data, std::string_view model) {
  const T* typed = dynamic_cast<const T*>(&data);
  if (typed == nullptr) {
    return absl::InvalidArgumentError(
        std::string("data of another model given to '").append(model).append("'"));
  }
  return typed;
}

}  // namespace pst::models

#endif  // PST_MODELS_MODEL_H_
