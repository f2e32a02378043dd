// Wide & deep CTR model (Cheng et al. 2016) on the CPU:
//
//   wide  = wide_bias + sum_f wide_emb[id_f]                  (a 1-dim embedding)
//   deep  = MLP(concat(deep_emb[id_1..id_F], dense_x))        (ReLU hidden, linear out)
//   logit = wide + deep,  loss = mean sigmoid cross-entropy
//
// Embedding rows are not held by the model: the caller gathers the rows of
// the batch's unique ids (from the ps) and passes them in; the model returns
// gradients for exactly those rows, summed over their occurrences.
//
// Dense parameters, in WideDeepDenseSpecs order:
//   "wide/bias" [1], then "deep/dense_<i>/kernel" [in, out], "deep/dense_<i>/bias" [out]
//   for i = 0..hidden.size(), with in_0 = F*D + num_dense and a last layer of 1 unit.
//
// Thread-safety: holds scratch buffers; one per thread.
#ifndef PST_MODELS_WIDE_DEEP_H_
#define PST_MODELS_WIDE_DEEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/classifier_metrics.h"
#include "common/partition.h"
#include "models/mlp.h"

namespace pst::models {

struct WideDeepConfig {
  int num_dense = 13;
  int num_fields = 26;
  int embedding_dim = 8;
  std::vector<int> hidden = {64, 32};
};

std::vector<ParamSpec> WideDeepDenseSpecs(const WideDeepConfig& config);

// A batch as the model sees it.
struct CtrBatch {
  int size = 0;
  const float* dense = nullptr;   // [size, num_dense]
  const int32_t* slot = nullptr;  // [size, num_fields]: index into the unique rows
  const float* labels = nullptr;  // [size], 0 or 1
  int num_unique = 0;
  const float* deep_rows = nullptr;  // [num_unique, embedding_dim]
  const float* wide_rows = nullptr;  // [num_unique, 1]
};

class WideDeep {
 public:
  explicit WideDeep(WideDeepConfig config);
  const WideDeepConfig& config() const { return config_; }

  // Mean sigmoid cross-entropy over the batch; fills the gradients of that
  // mean: `dense_grads` like `dense`, `deep_row_grads` [num_unique, D],
  // `wide_row_grads` [num_unique].
  // Errors: InvalidArgument for params that do not match the specs, a slot
  // outside [0, num_unique), a label other than 0/1, or batch <= 0.
  absl::StatusOr<float> LossAndGradients(const ParamSet& dense, const CtrBatch& batch,
                                         ParamSet* dense_grads, std::vector<float>* deep_row_grads,
                                         std::vector<float>* wide_row_grads);

  // Click probabilities for the batch (labels unused).
  absl::Status Predict(const ParamSet& dense, const CtrBatch& batch, std::vector<float>* probs);

 private:
  WideDeepConfig config_;
  std::vector<ParamSpec> specs_;
  // Scratch: the gathered deep input [batch, F*D + num_dense] and its
  // gradient, then the activations per deep layer (post-ReLU; the last holds
  // the logits) and their gradients.
  std::vector<float> input_;
  std::vector<float> dinput_;
  std::vector<std::vector<float>> acts_;
  std::vector<std::vector<float>> dacts_;
};

// The checks LossAndGradients (check_labels) and Predict make of their
// inputs, for other implementations of the model (device_wide_deep.h).
absl::Status CheckWideDeepInputs(const WideDeepConfig& config, const ParamSet& dense,
                                 const CtrBatch& batch, bool check_labels);
// Deep layer widths: F*D + num_dense, the hidden widths, then 1.
std::vector<int> WideDeepLayerDims(const WideDeepConfig& config);

// The model's scores (AUC, log-loss) and the deduplication of a batch's ids
// live in common/, where the data readers and the ps client reach them too.
using common::Auc;
using common::LogLoss;
using common::Sigmoid;
using common::UniqueIds;

}  // namespace pst::models

#endif  // PST_MODELS_WIDE_DEEP_H_
