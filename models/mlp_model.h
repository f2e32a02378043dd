// The MLP on Fashion-MNIST (--model=mlp, the default): 784 inputs, the
// --hidden ReLU layers (256,128 unless set), 10 softmax outputs; accuracy
// and cross-entropy on the test split. Reads --data_dir's IDX files.
#ifndef PST_MODELS_MLP_MODEL_H_
#define PST_MODELS_MLP_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "data/mnist_reader.h"
#include "models/mlp.h"
#include "models/model.h"
#include "models/train_loop.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

inline constexpr int kFashionMnistDim = 784;
inline constexpr int kFashionMnistClasses = 10;

// The MLP shape a config asks for. InvalidArgument for a width below 1.
absl::StatusOr<MlpConfig> MlpConfigFor(const proto::TrainingConfig& training);

// The MLP's training loop over `data` (see Model::Train). With
// training.overlap() in ASYNC or SSP mode, batch b's gradients are computed
// while the push+pull of batch b-1 is in flight.
absl::StatusOr<int64_t> TrainMlp(const proto::TrainingConfig& training, const data::Dataset& data,
                                 uint64_t shuffle_seed, client::PsClient* ps,
                                 const LoopControl& control);

}  // namespace pst::models

#endif  // PST_MODELS_MLP_MODEL_H_
