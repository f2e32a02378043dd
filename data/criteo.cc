#include "data/criteo.h"

#include <stdio.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/classifier_metrics.h"
#include "common/status_macros.h"
#include "data/reader_util.h"

namespace pst::data {
namespace {

using common::Sigmoid;
using data_internal::DrawRank;
using data_internal::ErrnoText;
using data_internal::FilePtr;
using data_internal::Mix64;
using data_internal::Normal;
using data_internal::Shown;
using data_internal::Uniform;
using data_internal::ZipfCdf;

constexpr int kCriteoColumns = 1 + kCriteoDense + kCriteoFields;
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
// The generator keeps a table of every (field, rank); this bounds its memory.
constexpr int64_t kMaxSyntheticVocab = 1000000;
// Probability that a generated integer / categorical cell is left empty.
constexpr double kEmptyIntegerRate = 0.05;
constexpr double kEmptyCategoricalRate = 0.02;
// Standard deviation of the hidden weights of the dense features.
constexpr double kDenseWeightScale = 0.3;
// Generated counts are capped here so they always print as plain integers.
constexpr double kMaxCount = 1e12;

// The buffer POSIX getline allocates and grows, freed at scope exit.
struct LineBuffer {
  LineBuffer() = default;
  LineBuffer(const LineBuffer&) = delete;
  LineBuffer& operator=(const LineBuffer&) = delete;
  ~LineBuffer() { std::free(data); }

  char* data = nullptr;
  size_t capacity = 0;
};

// Splits `line` at tabs into `cols` (reused between lines).
void SplitTabs(absl::string_view line, std::vector<absl::string_view>* cols) {
  cols->clear();
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    if (tab == absl::string_view::npos) {
      cols->push_back(line.substr(start));
      return;
    }
    cols->push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
}

absl::Status CheckSyntheticConfig(const SyntheticCriteoConfig& config) {
  if (config.rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rows must be >= 0, got ", config.rows));
  }
  if (config.vocab_per_field < 1 || config.vocab_per_field > kMaxSyntheticVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_per_field must be in [1, ", kMaxSyntheticVocab, "], got ", config.vocab_per_field));
  }
  if (!std::isfinite(config.zipf_s) || config.zipf_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zipf_s must be finite and >= 0, got ", config.zipf_s));
  }
  if (!std::isfinite(config.weight_scale) || config.weight_scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_scale must be finite and >= 0, got ", config.weight_scale));
  }
  if (!std::isfinite(config.churn) || config.churn < 0 || config.churn > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("churn must be in [0, 1000], got ", config.churn));
  }
  if (!std::isfinite(config.bias)) {
    return absl::InvalidArgumentError(absl::StrCat("bias must be finite, got ", config.bias));
  }
  return absl::OkStatus();
}

// The hidden ground truth of the generator, derived from the seed alone.
struct HiddenModel {
  int64_t vocab = 0;
  std::vector<double> zipf_cdf;          // [vocab], last entry 1
  std::vector<uint32_t> values;          // [fields, vocab]: raw value of each rank
  std::vector<double> weights;           // [fields, vocab]
  std::vector<double> weight_means;      // [fields]: what centering took off each weight
  std::vector<double> empty_weights;     // [fields]: weight of the empty value
  std::vector<double> dense_log_mean;    // [13]: log-normal location
  std::vector<double> dense_log_stddev;  // [13]: log-normal scale
  std::vector<double> dense_weights;     // [13]
};

HiddenModel MakeHiddenModel(const SyntheticCriteoConfig& config) {
  HiddenModel model;
  const int64_t vocab = config.vocab_per_field;
  model.vocab = vocab;
  std::mt19937_64 rng(Mix64(config.seed ^ 0x5eed0001u));

  model.zipf_cdf = ZipfCdf(vocab, config.zipf_s);

  const size_t table = static_cast<size_t>(kCriteoFields) * vocab;
  model.values.resize(table);
  model.weights.resize(table);
  model.empty_weights.resize(kCriteoFields);
  absl::flat_hash_set<uint32_t> seen;
  for (int f = 0; f < kCriteoFields; ++f) {
    seen.clear();
    for (int64_t k = 0; k < vocab; ++k) {
      // 8 hex digits from FeatureHash; a value that collides with an earlier
      // rank of the same field is redrawn, so ranks and values correspond
      // one to one.
      uint32_t value = 0;
      for (int attempt = 0;; ++attempt) {
        const std::string key = attempt == 0 ? absl::StrCat(config.seed, ":", k)
                                             : absl::StrCat(config.seed, ":", k, "#", attempt);
        value = static_cast<uint32_t>(FeatureHash(f, key));
        if (seen.insert(value).second) break;
      }
      model.values[f * vocab + k] = value;
      model.weights[f * vocab + k] = config.weight_scale * Normal(&rng);
    }
    model.empty_weights[f] = config.weight_scale * Normal(&rng);
    // Center each field's weights on their expected value under the value
    // distribution, so that `bias` alone sets the base rate whatever weights
    // the seed happens to give the most frequent values.
    double mean = kEmptyCategoricalRate * model.empty_weights[f];
    double previous = 0;
    for (int64_t k = 0; k < vocab; ++k) {
      mean += (1.0 - kEmptyCategoricalRate) * (model.zipf_cdf[k] - previous) *
              model.weights[f * vocab + k];
      previous = model.zipf_cdf[k];
    }
    for (int64_t k = 0; k < vocab; ++k) model.weights[f * vocab + k] -= mean;
    model.weight_means.push_back(mean);
    model.empty_weights[f] -= mean;
  }

  for (int j = 0; j < kCriteoDense; ++j) {
    model.dense_log_mean.push_back(0.5 + 3.5 * Uniform(&rng));
    model.dense_log_stddev.push_back(0.5 + Uniform(&rng));
    model.dense_weights.push_back(kDenseWeightScale * Normal(&rng));
  }
  return model;
}

}  // namespace

uint64_t FeatureHash(int field, const std::string& value) {
  uint64_t h = kFnvOffset;
  const uint32_t f = static_cast<uint32_t>(field);
  for (int shift = 0; shift < 32; shift += 8) {  // little-endian on every host
    h ^= (f >> shift) & 0xffu;
    h *= kFnvPrime;
  }
  for (const char c : value) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnvPrime;
  }
  return Mix64(h);
}

absl::Status CheckCtrFeatures(const CtrFeatureConfig& features) {
  const int64_t buckets = features.buckets_per_field;
  if (buckets < 0 || buckets > std::numeric_limits<int64_t>::max() / kCriteoFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("buckets_per_field must be 0 (hash ids) or in [1, ",
                     std::numeric_limits<int64_t>::max() / kCriteoFields, "], got ", buckets));
  }
  return absl::OkStatus();
}

CriteoLineParser::CriteoLineParser(const CtrFeatureConfig& features)
    : buckets_(features.buckets_per_field) {
  cols_.reserve(kCriteoColumns);
}

absl::Status CriteoLineParser::Parse(absl::string_view line, const std::string& path,
                                     int64_t line_number, CtrDataset* data) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // The error for this line; built only when needed.
  auto line_error = [&path, line_number](const auto&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": ", parts...));
  };

  SplitTabs(line, &cols_);
  if (cols_.size() != kCriteoColumns) {
    return line_error("expected ", kCriteoColumns,
                      " tab-separated columns (label, 13 integer, 26 categorical), got ",
                      cols_.size());
  }
  if (cols_[0] != "0" && cols_[0] != "1") {
    return line_error("label must be 0 or 1, got ", Shown(cols_[0]));
  }
  data->labels.push_back(cols_[0] == "1" ? 1.0f : 0.0f);
  for (int j = 0; j < kCriteoDense; ++j) {
    const absl::string_view cell = cols_[1 + j];
    int64_t x = 0;
    if (!cell.empty() && !absl::SimpleAtoi(cell, &x)) {
      return line_error("integer feature I", j + 1, " is not a 64-bit integer: ", Shown(cell));
    }
    data->dense.push_back(
        static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(x, 0)))));
  }
  for (int f = 0; f < kCriteoFields; ++f) {
    const absl::string_view cell = cols_[1 + kCriteoDense + f];
    value_.assign(cell.data(), cell.size());
    const uint64_t h = FeatureHash(f, value_);
    const int64_t id =
        buckets_ > 0 ? f * buckets_ + static_cast<int64_t>(h % static_cast<uint64_t>(buckets_))
                     : static_cast<int64_t>(h & 0x7fffffffffffffffull);
    data->ids.push_back(id);
  }
  ++data->size;
  return absl::OkStatus();
}

absl::StatusOr<CtrDataset> ReadCriteo(const std::string& path, const CtrFeatureConfig& features,
                                      int64_t max_rows) {
  if (max_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_rows must be >= 0, got ", max_rows));
  }
  PST_RETURN_IF_ERROR(CheckCtrFeatures(features));
  errno = 0;
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const int saved = errno;
    return absl::ErrnoToStatus(saved, absl::StrCat("cannot open Criteo file ", path));
  }

  CtrDataset data;
  CriteoLineParser parser(features);
  LineBuffer buffer;
  int64_t line_number = 0;
  while (max_rows == 0 || data.size < max_rows) {
    errno = 0;
    const ssize_t got = ::getline(&buffer.data, &buffer.capacity, file.get());
    if (got < 0) break;
    ++line_number;
    const absl::Status parsed = parser.Parse(
        absl::string_view(buffer.data, static_cast<size_t>(got)), path, line_number, &data);
    if (!parsed.ok()) return parsed;
  }
  if (std::ferror(file.get())) {
    const int saved = errno;
    return absl::DataLossError(
        absl::StrCat("error reading ", path, " after line ", line_number, ": ", ErrnoText(saved)));
  }
  return data;
}

void SplitHeldOut(CtrDataset* data, double fraction, CtrDataset* held_out) {
  if (data == nullptr || held_out == nullptr || data == held_out) return;
  if (!(fraction > 0)) fraction = 0;  // also NaN
  if (fraction > 1) fraction = 1;
  // Trust only as many rows as every vector holds.
  int64_t n = std::max<int64_t>(data->size, 0);
  n = std::min<int64_t>(n, static_cast<int64_t>(data->labels.size()));
  n = std::min<int64_t>(n, static_cast<int64_t>(data->dense.size() / kCriteoDense));
  n = std::min<int64_t>(n, static_cast<int64_t>(data->ids.size() / kCriteoFields));
  const int64_t held = std::min<int64_t>(n, std::llround(static_cast<double>(n) * fraction));
  const int64_t keep = n - held;

  held_out->size = held;
  held_out->dense.assign(data->dense.begin() + keep * kCriteoDense,
                         data->dense.begin() + n * kCriteoDense);
  held_out->ids.assign(data->ids.begin() + keep * kCriteoFields,
                       data->ids.begin() + n * kCriteoFields);
  held_out->labels.assign(data->labels.begin() + keep, data->labels.begin() + n);
  data->size = keep;
  data->dense.resize(keep * kCriteoDense);
  data->ids.resize(keep * kCriteoFields);
  data->labels.resize(keep);
}

// SyntheticCriteoConfig.churn: retires values of `model` as the rows go.
// Draws from its own stream, so that without churn the rows are what they
// were before churn existed.
class ValueChurn {
 public:
  ValueChurn(const SyntheticCriteoConfig& config, HiddenModel* model)
      : model_(model),
        rng_(Mix64(config.seed ^ 0x5eed0003u)),
        seed_(config.seed),
        weight_scale_(config.weight_scale),
        rows_(config.rows),
        total_(static_cast<int64_t>(std::llround(config.churn * model->vocab))),
        seen_(kCriteoFields) {
    if (total_ == 0) return;
    for (int f = 0; f < kCriteoFields; ++f) {
      seen_[f].insert(&model->values[f * model->vocab], &model->values[(f + 1) * model->vocab]);
    }
  }

  // Replaces, in each field, the values due by row `r` (of rows_).
  void Advance(int64_t r) {
    if (total_ == 0 || rows_ == 0) return;
    const int64_t due = static_cast<int64_t>(static_cast<__int128>(total_) * r / rows_);
    const int64_t vocab = model_->vocab;
    for (; done_ < due; ++done_) {
      for (int f = 0; f < kCriteoFields; ++f) {
        const int64_t rank = std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng_);
        uint32_t value = 0;
        for (int attempt = 0;; ++attempt) {
          value = static_cast<uint32_t>(
              FeatureHash(f, absl::StrCat(seed_, ":churn:", done_, "#", attempt)));
          if (seen_[f].insert(value).second) break;
        }
        model_->values[f * vocab + rank] = value;
        model_->weights[f * vocab + rank] = weight_scale_ * Normal(&rng_) - model_->weight_means[f];
      }
    }
  }

 private:
  HiddenModel* model_;
  std::mt19937_64 rng_;
  const uint64_t seed_;
  const double weight_scale_;
  const int64_t rows_;
  const int64_t total_;  // replacements per field over the file
  int64_t done_ = 0;
  std::vector<absl::flat_hash_set<uint32_t>> seen_;  // [fields]: every value so far
};

absl::StatusOr<SyntheticCriteoStats> WriteSyntheticCriteo(const std::string& path,
                                                          const SyntheticCriteoConfig& config) {
  const absl::Status valid = CheckSyntheticConfig(config);
  if (!valid.ok()) return valid;
  HiddenModel model = MakeHiddenModel(config);
  const int64_t vocab = model.vocab;
  ValueChurn churn(config, &model);
  absl::flat_hash_set<uint64_t> written;  // (field << 32) | value

  errno = 0;
  FilePtr file(std::fopen(path.c_str(), "wb"));
  if (file == nullptr) {
    const int saved = errno;
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(saved)));
  }

  // Rows draw from their own stream, so the hidden model does not depend on
  // the number of rows.
  std::mt19937_64 rng(Mix64(config.seed ^ 0x5eed0002u));
  std::vector<float> probs;
  std::vector<float> labels;
  probs.reserve(static_cast<size_t>(config.rows));
  labels.reserve(static_cast<size_t>(config.rows));
  int64_t positives = 0;
  std::string features;
  std::string line;
  for (int64_t r = 0; r < config.rows; ++r) {
    churn.Advance(r);
    features.clear();
    double logit = config.bias;
    for (int j = 0; j < kCriteoDense; ++j) {
      double count = 0;  // an empty cell reads as 0, and the truth sees what the reader sees
      if (Uniform(&rng) >= kEmptyIntegerRate) {
        count = std::floor(
            std::exp(model.dense_log_mean[j] + model.dense_log_stddev[j] * Normal(&rng)));
        count = std::min(count, kMaxCount);
        absl::StrAppend(&features, static_cast<int64_t>(count));
      }
      // Centered on the log-normal's location, so the dense part adds little
      // to the base rate.
      logit += model.dense_weights[j] * (std::log1p(count) - model.dense_log_mean[j]);
      features.push_back('\t');
    }
    for (int f = 0; f < kCriteoFields; ++f) {
      if (Uniform(&rng) < kEmptyCategoricalRate) {
        logit += model.empty_weights[f];
      } else {
        const int64_t rank = DrawRank(model.zipf_cdf, &rng);
        const uint32_t value = model.values[f * vocab + rank];
        written.insert(static_cast<uint64_t>(f) << 32 | value);
        absl::StrAppend(&features, absl::Hex(value, absl::kZeroPad8));
        logit += model.weights[f * vocab + rank];
      }
      features.push_back(f + 1 < kCriteoFields ? '\t' : '\n');
    }
    const double p = Sigmoid(logit);
    const bool positive = Uniform(&rng) < p;
    positives += positive ? 1 : 0;
    probs.push_back(static_cast<float>(p));
    labels.push_back(positive ? 1.0f : 0.0f);

    line.assign(positive ? "1\t" : "0\t");
    line += features;
    if (std::fwrite(line.data(), 1, line.size(), file.get()) != line.size()) {
      const int saved = errno;
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(saved)));
    }
  }
  FILE* raw = file.release();
  errno = 0;
  if (std::fclose(raw) != 0) {
    const int saved = errno;
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(saved)));
  }

  SyntheticCriteoStats stats;
  stats.rows = config.rows;
  stats.positive_rate =
      config.rows > 0 ? static_cast<double>(positives) / static_cast<double>(config.rows) : 0.0;
  stats.best_auc = common::Auc(probs, labels);
  stats.distinct_values = static_cast<int64_t>(written.size());
  return stats;
}

absl::StatusOr<CtrDataset> LoadCtrSplit(const proto::TrainingConfig& training, bool held_out,
                                        int shard, int num_shards) {
  if (training.data().empty()) {
    return absl::InvalidArgumentError("the wide_deep model needs --data=<Criteo-format file>");
  }
  CtrFeatureConfig features;
  features.buckets_per_field = training.buckets_per_field();
  PST_ASSIGN_OR_RETURN(CtrDataset all, ReadCriteo(training.data(), features));
  CtrDataset tail;
  // --eval_data names a held-out set of its own: nothing of --data is.
  if (training.eval_data().empty()) SplitHeldOut(&all, training.eval_fraction(), &tail);
  if (held_out) return tail;
  if (num_shards <= 1) return all;
  CtrDataset mine;
  for (int64_t i = shard; i < all.size; i += num_shards) {
    mine.dense.insert(mine.dense.end(), &all.dense[i * kCriteoDense],
                      &all.dense[(i + 1) * kCriteoDense]);
    mine.ids.insert(mine.ids.end(), &all.ids[i * kCriteoFields], &all.ids[(i + 1) * kCriteoFields]);
    mine.labels.push_back(all.labels[i]);
    ++mine.size;
  }
  return mine;
}

}  // namespace pst::data
