// Criteo Kaggle display-advertising format, and a generator of data in that
// format with a known best achievable AUC.
//
// A line: label \t I1..I13 \t C1..C26, tab-separated. Integer features may
// be empty (read as 0) and are fed to the model as log(1 + max(0, x));
// categorical features are hex strings (usually 8 chars), may be empty, and
// are hashed into embedding ids:
//   bucketed: id = f * buckets_per_field + Hash(f, value) % buckets_per_field
//   hash:     id = Hash(f, value) & 0x7fffffffffffffff  (unbounded id space)
// An empty categorical value gets its own bucket (value "").
#ifndef PST_DATA_CRITEO_H_
#define PST_DATA_CRITEO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pst::data {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoFields = 26;

struct CtrFeatureConfig {
  // > 0: bucketed ids in [0, 26 * buckets_per_field). 0: hash ids.
  int64_t buckets_per_field = 100000;
};

struct CtrDataset {
  int64_t size = 0;
  std::vector<float> dense;   // [size, 13], already log-transformed
  std::vector<int64_t> ids;   // [size, 26]
  std::vector<float> labels;  // [size]
};

// A stable 64-bit hash of (field, value): the same on every machine and run.
uint64_t FeatureHash(int field, const std::string& value);

// Reads up to `max_rows` lines (0: all). Errors: NotFound for a missing
// file; InvalidArgument naming file:line for a line with the wrong number
// of columns, a label other than 0/1, or an integer feature that does not
// parse.
absl::StatusOr<CtrDataset> ReadCriteo(const std::string& path, const CtrFeatureConfig& features,
                                      int64_t max_rows = 0);

// Errors: InvalidArgument for a buckets_per_field out of the range
// ReadCriteo and CriteoLineParser accept.
absl::Status CheckCtrFeatures(const CtrFeatureConfig& features);

// Parses Criteo lines one at a time, each appending its example to a
// CtrDataset: what ReadCriteo does with each line, for readers that bring
// their own lines (data/example_stream.h). Keeps its scratch space from one
// line to the next; not thread-safe.
class CriteoLineParser {
 public:
  // REQUIRES: CheckCtrFeatures(features) is OK.
  explicit CriteoLineParser(const CtrFeatureConfig& features);

  // Parses one line (a trailing '\n' and then '\r' are dropped) into
  // `data`. `path` and `line_number` only name the line in errors, which
  // are ReadCriteo's InvalidArgument ones. On error `data` may hold part of
  // the example.
  absl::Status Parse(absl::string_view line, const std::string& path, int64_t line_number,
                     CtrDataset* data);

 private:
  const int64_t buckets_;
  std::vector<absl::string_view> cols_;
  std::string value_;
};

// Splits off the last `fraction` of the rows as a held-out set.
void SplitHeldOut(CtrDataset* data, double fraction, CtrDataset* held_out);

// Reads training.data(): the held-out tail (the last eval_fraction of the
// rows) or shard `shard` of `num_shards` of the rest (rows i with
// i % num_shards == shard). With training.eval_data() set (a held-out set
// of its own, streamed by the model) nothing is held out: the tail is empty.
absl::StatusOr<CtrDataset> LoadCtrSplit(const proto::TrainingConfig& training, bool held_out,
                                        int shard, int num_shards);

// Synthetic Criteo-format data from a hidden ground-truth logistic model:
// each field has `vocab_per_field` raw values drawn with Zipf(zipf_s)
// frequencies (power law), each value has a hidden weight ~ N(0, sigma^2)
// (sigma = weight_scale), the dense features are drawn from a log-normal
// and carry hidden weights too, and label ~ Bernoulli(sigmoid(bias + sum)).
struct SyntheticCriteoConfig {
  int64_t rows = 100000;
  int64_t vocab_per_field = 10000;
  double zipf_s = 1.1;
  double weight_scale = 0.25;
  double bias = -1.0;  // about 35% positives; best AUC about 0.8, as on real Criteo data
  uint64_t seed = 1;
  // Id churn (0: none, the file a fixed vocabulary draws). With F > 0 each
  // field retires F * vocab_per_field values over the file, evenly spread
  // over the rows: before a row, the values due are replaced, each at a
  // rank drawn uniformly, by a new value with a new hidden weight (drawn as
  // the first ones were). At any row a field has vocab_per_field values, as
  // without churn, but over the file up to (1 + F) times as many appear.
  // Labels still come from the hidden model of the row's moment.
  double churn = 0;
};

struct SyntheticCriteoStats {
  int64_t rows = 0;
  double positive_rate = 0;
  // AUC of the true probabilities against the drawn labels: the best any
  // model can do on this data (up to sampling noise).
  double best_auc = 0;
  // Distinct non-empty categorical (field, value) pairs written.
  int64_t distinct_values = 0;
};

// Writes the file. Errors: Internal naming the path when it cannot be written.
absl::StatusOr<SyntheticCriteoStats> WriteSyntheticCriteo(const std::string& path,
                                                          const SyntheticCriteoConfig& config);

}  // namespace pst::data

#endif  // PST_DATA_CRITEO_H_
