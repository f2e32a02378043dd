// The libsvm (svmlight) sparse text format, as read for the sparse logistic
// regression model (--model=logreg), and a generator of data in that format
// with a known best achievable AUC.
//
// A line: `label id:value id:value ...`, separated by spaces or tabs.
//   label: a number equal to 0, 1 or -1 ("0", "1", "+1", "-1", "1.0",
//          "0.0", "-1.0", "1e0", ...); -1 and 0 are both read as 0.
//   id:    an unsigned decimal integer in [0, 2^64 - 1], no sign.
//   value: a finite float ("1", "0.25", "-3e-2", "+0.5"); "inf", "nan" and
//          numbers beyond the float range are errors.
// A `#` starts a comment that runs to the end of the line. Lines that hold
// nothing but blanks and a comment are skipped (they still count in the line
// numbers of error messages). A line may end in \n or \r\n, and the last one
// may lack its newline. An example may have zero features (`1`, `0 # none`).
// Ids are not required to be sorted or distinct within a line: features are
// kept in file order, repeats included (a linear model sums them).
// Ranking (`qid:`) lines are not supported: `qid` is not an id.
//
// Raw ids map to table rows (LibsvmFeatureId):
//   bucketed (buckets > 0): row = Mix64(raw) % buckets, with Mix64 the
//       splitmix64 finalizer. A hash rather than raw % buckets, because
//       libsvm ids are often structured (a field in the high bits, or ids
//       that are all multiples of some stride) and raw % buckets would then
//       collide whole groups; with a hash, collisions are as if at random.
//   hash (buckets == 0): ids below 2^63 are kept as they are (so data with
//       small dense ids, the usual libsvm case, is free of collisions);
//       ids in [2^63, 2^64) become Mix64(raw) & (2^63 - 1), which may
//       collide with another id only by chance.
// Both mappings are the same on every machine and every run.
//
// The functions below share no state: each is safe to call from any thread.
#ifndef PST_DATA_LIBSVM_H_
#define PST_DATA_LIBSVM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pst::data {

// The most features one example may have; a longer line is an error.
inline constexpr int64_t kMaxLibsvmFeatures = int64_t{1} << 20;

struct LibsvmFeatureConfig {
  // > 0: ids folded into [0, buckets). 0: hash ids in [0, 2^63).
  int64_t buckets = 0;
};

// Examples in compressed sparse row form.
struct LibsvmDataset {
  int64_t size = 0;              // examples
  std::vector<int64_t> offsets;  // [size + 1], offsets[0] == 0; example i's
                                 // features are [offsets[i], offsets[i + 1])
  std::vector<int64_t> ids;      // mapped feature ids (LibsvmFeatureId)
  std::vector<float> values;     // [ids.size()]
  std::vector<float> labels;     // [size], 0 or 1
};

// The table row of raw id `raw` (see the top of this file): with
// buckets > 0, in [0, buckets); with buckets == 0, in [0, 2^63).
// REQUIRES: buckets >= 0 (a negative value is treated as 0).
int64_t LibsvmFeatureId(uint64_t raw, int64_t buckets);

// Reads up to `max_rows` examples (0: all; blank and comment lines are not
// examples). Errors:
//   NotFound (or another errno code) when the file cannot be opened;
//   InvalidArgument for buckets < 0 or max_rows < 0;
//   InvalidArgument naming `file:line` and the offending token (quoted, cut
//     to 40 characters) for a label that is not 0, 1 or -1, a feature token
//     without ':', an id that is not an unsigned decimal integer or exceeds
//     2^64 - 1, a value that is not a finite float, or an example with more
//     than kMaxLibsvmFeatures features;
//   DataLoss when reading fails midway.
// The file is read in large chunks and parsed in place: no per-token
// allocation.
absl::StatusOr<LibsvmDataset> ReadLibsvm(const std::string& path,
                                         const LibsvmFeatureConfig& features, int64_t max_rows = 0);

// Parses one line (without its '\n') and appends its example to `data`,
// unless the line is blank or a comment: what ReadLibsvm does with each
// line, for readers that bring their own lines (data/example_stream.h).
// `path` and `line_number` only name the line in errors, which are
// ReadLibsvm's InvalidArgument ones. On error `data` may hold some of the
// example's ids and values (but not its label or offset).
// REQUIRES: data->offsets is not empty (it starts with 0).
absl::Status ParseLibsvmLine(absl::string_view line, const std::string& path, int64_t line_number,
                             int64_t buckets, LibsvmDataset* data);
// Whether ParseLibsvmLine makes an example of `line` (or fails on it):
// false for a blank or comment line, which it passes over.
bool LibsvmLineHasExample(absl::string_view line);

// Moves the last `fraction` of the examples (llround(size * fraction), with
// fraction clamped to [0, 1] and NaN read as 0) from `data` into `held_out`,
// as SplitHeldOut in data/criteo.h does for Criteo data. Does nothing when
// either pointer is null or both are the same.
void SplitLibsvmHeldOut(LibsvmDataset* data, double fraction, LibsvmDataset* held_out);

// Reads training.data() with the given `buckets` (the caller passes the
// model config's value) and returns the held-out tail (the last
// training.eval_fraction() of the examples) or shard `shard` of `num_shards`
// of the rest (examples i with i % num_shards == shard; all of them when
// num_shards <= 1): the same split rules as LoadCtrSplit in data/criteo.h.
// With training.eval_data() set nothing is held out (the tail is empty).
// Errors: those of ReadLibsvm; InvalidArgument when training.data() is
// empty, or when num_shards > 1 and shard is not in [0, num_shards).
absl::StatusOr<LibsvmDataset> LoadLibsvmSplit(const proto::TrainingConfig& training,
                                              int64_t buckets, bool held_out, int shard,
                                              int num_shards);

// Synthetic libsvm data from a hidden sparse logistic model:
// - `features` raw ids, one per popularity rank k, spread over the whole
//   64-bit range (raw = Mix64(k + a seed-derived salt): distinct, about half
//   of them >= 2^63); rank k is drawn with probability proportional to
//   (k + 1)^-zipf_s (Zipf: a power law, as for real categorical data);
// - each example has `nnz` distinct features, drawn by rank (a rank drawn
//   twice in one example is drawn again; in the rare example that repeats
//   too often, only possible with nnz near features, the rest are the most
//   popular unused ranks). A feature's value is 1 for 3 features in 4,
//   otherwise a number in [0.001, 2] written with 3 decimals, so that both
//   the reader's value parsing and the model's use of values are exercised;
// - each id has a hidden weight, nonzero with probability `density` and
//   then ~ N(0, weight_scale^2);
// - label ~ Bernoulli(sigmoid(intercept + sum_j w_j * x_j)), written as 0/1,
//   where the intercept is chosen so that the mean logit is about `bias`
//   (intercept = bias - the mean of sum w*x, estimated on rows from a
//   separate stream), so that the base rate does not hinge on the weights
//   the seed happens to give the most popular ids.
// Lines are `label id:value ...` with ids in the order drawn.
//
// The defaults give about 41% positives and a best AUC of about 0.80-0.81,
// and they are learnable: a plain logistic regression (FTRL, 3 epochs, one
// example at a time) on the first 90% of the 200k rows gets to within
// 0.002-0.004 (seeds 1-3) of best_auc_tail on the last 10%. What limits a
// trained model is the number of weights to learn per row of data: with
// 200k rows the gap is about 0.005 at 2000 features, 0.015 at 10000 and
// 0.04 at 100000, so raise `rows` with `features` when a model must get
// close to the best AUC.
struct SyntheticLibsvmConfig {
  int64_t rows = 200000;
  int64_t features = 1000;    // in [1, 1 << 24]
  int nnz = 20;               // in [0, min(features, kMaxLibsvmFeatures)]
  double zipf_s = 1.05;       // finite, >= 0
  double weight_scale = 0.6;  // finite, >= 0
  double density = 0.3;       // in [0, 1]
  double bias = -0.5;         // finite
  uint64_t seed = 1;
};

struct SyntheticLibsvmStats {
  int64_t rows = 0;
  double positive_rate = 0;
  // AUC of the true probabilities against the drawn labels over all rows:
  // the best any model can do on this data (up to sampling noise).
  double best_auc = 0;
  // The same over the last 10% of the rows (llround(rows * 0.1)): the
  // default held-out split (--eval_fraction=0.1), the number to compare a
  // trained model's evaluation AUC with.
  double best_auc_tail = 0;
};

// Writes the file (the same bytes for the same config). Errors:
// InvalidArgument for a config out of the ranges above; Internal naming the
// path when it cannot be written.
absl::StatusOr<SyntheticLibsvmStats> WriteSyntheticLibsvm(const std::string& path,
                                                          const SyntheticLibsvmConfig& config);

}  // namespace pst::data

#endif  // PST_DATA_LIBSVM_H_
