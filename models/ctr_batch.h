// A wide & deep batch gathered for the ps and the model: the examples'
// dense features and labels, their ids deduplicated, and the embedding rows
// of those ids once pulled. The training loop and the evaluation
// (models/wide_deep_model.cc) share it.
// Thread-compatible: one per loop, reused from batch to batch.
#ifndef PST_MODELS_CTR_BATCH_H_
#define PST_MODELS_CTR_BATCH_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "client/ps_client.h"
#include "data/criteo.h"
#include "models/wide_deep_model.h"
#include "models/wide_deep.h"

namespace pst::models {

// A gathered wide & deep batch: dense features, labels and the unique ids.
struct CtrBatchData {
  std::vector<float> dense, labels;
  std::vector<int64_t> ids, unique;
  std::vector<int32_t> slot;
  client::Values rows;  // [deep rows, wide rows] of the unique ids

  // Gathers examples[0..n) of `data` and deduplicates their ids.
  void Gather(const data::CtrDataset& data, const int64_t* examples, int64_t n) {
    dense.resize(n * data::kCriteoDense);
    labels.resize(n);
    ids.resize(n * data::kCriteoFields);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t e = examples[k];
      std::copy_n(&data.dense[e * data::kCriteoDense], data::kCriteoDense,
                  &dense[k * data::kCriteoDense]);
      std::copy_n(&data.ids[e * data::kCriteoFields], data::kCriteoFields,
                  &ids[k * data::kCriteoFields]);
      labels[k] = data.labels[e];
    }
    UniqueIds(ids.data(), static_cast<int64_t>(ids.size()), &unique, &slot);
  }
  // The rows to pull (into `rows`) and push: both embeddings, at the unique ids.
  std::vector<client::PsClient::TableIds> Tables() const {
    return {{kDeepEmbedding, unique}, {kWideEmbedding, unique}};
  }
  // The batch as WideDeep takes it. REQUIRES: `rows` pulled for Tables().
  CtrBatch View(int64_t n) const {
    CtrBatch b;
    b.size = static_cast<int>(n);
    b.dense = dense.data();
    b.slot = slot.data();
    b.labels = labels.data();
    b.num_unique = static_cast<int>(unique.size());
    b.deep_rows = rows[0].data();
    b.wide_rows = rows[1].data();
    return b;
  }
};

}  // namespace pst::models

#endif  // PST_MODELS_CTR_BATCH_H_
