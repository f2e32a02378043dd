// Wide & deep on Criteo-format CTR data (--model=wide_deep): 13 dense
// features and 26 categorical fields; a wide (linear) part over the fields'
// embedding rows of width 1 and a deep part (embeddings of --embedding_dim,
// then --hidden ReLU layers, 64,32 unless set); AUC and log-loss on the
// held-out tail. Reads --data (a file, or "generate[:rows=,vocab=,seed=]").
#ifndef PST_MODELS_WIDE_DEEP_MODEL_H_
#define PST_MODELS_WIDE_DEEP_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "data/criteo.h"
#include "models/model.h"
#include "models/train_loop.h"
#include "models/wide_deep.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

// Embedding tables of the wide & deep model.
inline constexpr char kDeepEmbedding[] = "deep/embedding";
inline constexpr char kWideEmbedding[] = "wide/embedding";

// The wide & deep shape a config asks for. InvalidArgument for a width
// below 1.
absl::StatusOr<WideDeepConfig> WideDeepConfigFor(const proto::TrainingConfig& training);

// The training loop over `data` (see Model::Train; the model's data, loaded
// or streamed, from its Load): per batch, pull the
// rows of its unique ids, compute, push the row gradients, then the fused
// dense push+pull.
absl::StatusOr<int64_t> TrainWideDeep(const proto::TrainingConfig& training,
                                      const ModelData& data, uint64_t shuffle_seed,
                                      client::PsClient* ps, const LoopControl& control);

// The model of `training`, with the dense variables and the embedding rows
// pulled from `ps`, scored on every example of `data` (the held-out set from
// the model's Load, loaded or streamed; ClassifierEvaluation).
// Errors: those of the pulls and of the model's checks of its inputs.
absl::StatusOr<ModelEvaluation> EvaluateWideDeep(const proto::TrainingConfig& training,
                                                 const ModelData& data,
                                                 client::PsClient* ps);

}  // namespace pst::models

#endif  // PST_MODELS_WIDE_DEEP_MODEL_H_
