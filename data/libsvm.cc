#include "data/libsvm.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
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

constexpr uint64_t kLow63 = 0x7fffffffffffffffull;
// The reader's buffer (smaller for a smaller file); it doubles for a line
// longer than that.
constexpr size_t kReadChunk = size_t{4} << 20;
// The generator flushes its output when this much is buffered.
constexpr size_t kWriteChunk = size_t{1} << 20;
// The generator keeps a table of every id; this bounds its memory.
constexpr int64_t kMaxSyntheticFeatures = int64_t{1} << 24;
// Generated values: 1 for most features, otherwise m / 1000 for m uniform
// in [1, kMaxMilli].
constexpr double kNonUnitValueRate = 0.25;
constexpr int kMaxMilli = 2000;
// Rows drawn (from a stream of their own) to estimate the mean of sum w*x.
constexpr int kPilotRows = 8192;
// The held-out tail the generator rates separately (--eval_fraction's default).
constexpr double kDefaultEvalFraction = 0.1;

// The separators of a libsvm line ('\n' never reaches the line parser).
inline bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// [begin, end) without one leading '+' (std::from_chars takes none), unless
// a second sign follows it. Leaves an empty or signless text as it is.
inline const char* SkipPlus(const char* begin, const char* end) {
  if (end - begin >= 2 && begin[0] == '+' && begin[1] != '+' && begin[1] != '-') return begin + 1;
  return begin;
}

// Parses [begin, end) as a label; true for a number equal to 0, 1 or -1.
bool ParseLabel(const char* begin, const char* end, float* label) {
  const size_t n = static_cast<size_t>(end - begin);
  // The usual spellings, without a float parse.
  if (n == 1 && (*begin == '0' || *begin == '1')) {
    *label = *begin == '1' ? 1.0f : 0.0f;
    return true;
  }
  if (n == 2 && (begin[0] == '-' || begin[0] == '+') && begin[1] == '1') {
    *label = begin[0] == '+' ? 1.0f : 0.0f;
    return true;
  }
  const char* first = SkipPlus(begin, end);
  double x = 0;
  const std::from_chars_result r = std::from_chars(first, end, x);
  if (r.ec != std::errc() || r.ptr != end) return false;
  if (x == 1.0) {
    *label = 1.0f;
    return true;
  }
  if (x == 0.0 || x == -1.0) {
    *label = 0.0f;
    return true;
  }
  return false;
}

// Parses [begin, end) as a finite float; false for anything else.
bool ParseValue(const char* begin, const char* end, float* value) {
  const char* first = SkipPlus(begin, end);
  if (end - first == 1 && *first == '1') {  // the most common value by far
    *value = 1.0f;
    return true;
  }
  float x = 0;
  const std::from_chars_result r = std::from_chars(first, end, x);
  if (r.ptr != end || r.ec == std::errc::invalid_argument) return false;
  if (r.ec == std::errc::result_out_of_range) {
    // Overflow (an error) or underflow (fine: the nearest float, maybe 0).
    // Rare enough for a copy and strtod to tell them apart.
    const std::string copy(first, end);
    char* stop = nullptr;
    const double d = std::strtod(copy.c_str(), &stop);
    if (stop != copy.c_str() + copy.size() || !std::isfinite(d) ||
        std::fabs(d) > std::numeric_limits<float>::max()) {
      return false;
    }
    x = static_cast<float>(d);
  }
  if (!std::isfinite(x)) return false;
  *value = x;
  return true;
}

// Parses one line (without its '\n') into `data`, which gains an example
// unless the line is blank or a comment.
absl::Status ParseLine(absl::string_view line, const std::string& path, int64_t line_number,
                       int64_t buckets, LibsvmDataset* data) {
  const char* p = line.data();
  const char* end = p + line.size();
  if (const void* hash = std::memchr(p, '#', line.size())) end = static_cast<const char*>(hash);
  // The error for this line and token; built only when needed.
  auto line_error = [&path, line_number](const char* begin, const char* stop,
                                         const auto&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_number, ": ", parts...,
                     Shown(absl::string_view(begin, static_cast<size_t>(stop - begin)))));
  };

  while (p != end && IsBlank(*p)) ++p;
  if (p == end) return absl::OkStatus();
  const char* token = p;
  while (p != end && !IsBlank(*p)) ++p;
  float label = 0;
  if (!ParseLabel(token, p, &label)) {
    return line_error(token, p, "label must be a number equal to 0, 1 or -1, got ");
  }

  int64_t count = 0;
  while (true) {
    while (p != end && IsBlank(*p)) ++p;
    if (p == end) break;
    token = p;
    while (p != end && !IsBlank(*p)) ++p;
    if (++count > kMaxLibsvmFeatures) {
      return line_error(token, p, "example has more than ", kMaxLibsvmFeatures,
                        " features; the first one over is ");
    }
    const char* colon =
        static_cast<const char*>(std::memchr(token, ':', static_cast<size_t>(p - token)));
    if (colon == nullptr) {
      return line_error(token, p, "feature must be id:value, no ':' in ");
    }
    uint64_t raw = 0;
    const std::from_chars_result r = std::from_chars(token, colon, raw);
    if (r.ec == std::errc::result_out_of_range) {
      return line_error(token, p, "feature id exceeds 2^64-1 in ");
    }
    if (r.ec != std::errc() || r.ptr != colon) {
      return line_error(token, p, "feature id is not an unsigned decimal integer in ");
    }
    float value = 0;
    if (!ParseValue(colon + 1, p, &value)) {
      return line_error(token, p, "feature value is not a finite float in ");
    }
    data->ids.push_back(LibsvmFeatureId(raw, buckets));
    data->values.push_back(value);
  }
  data->labels.push_back(label);
  data->offsets.push_back(static_cast<int64_t>(data->ids.size()));
  ++data->size;
  return absl::OkStatus();
}

// Reserves room in `data` for `scale` times what it holds now (plus a
// margin), and for no more than max_rows examples when max_rows > 0.
void ReserveFor(double scale, int64_t max_rows, LibsvmDataset* data) {
  constexpr double kMargin = 1.05;
  const double size = static_cast<double>(std::max<int64_t>(data->size, 1));
  double rows = size * scale * kMargin;
  if (max_rows > 0) rows = std::min(rows, static_cast<double>(max_rows));
  const double features = static_cast<double>(data->ids.size()) / size * rows * kMargin;
  data->offsets.reserve(static_cast<size_t>(rows) + 1);
  data->labels.reserve(static_cast<size_t>(rows));
  data->ids.reserve(static_cast<size_t>(features));
  data->values.reserve(static_cast<size_t>(features));
}

// Examples [begin, end) of `from` appended to `to`.
void AppendExamples(const LibsvmDataset& from, int64_t begin, int64_t end, LibsvmDataset* to) {
  if (to->offsets.empty()) to->offsets.push_back(0);
  const int64_t base = static_cast<int64_t>(to->ids.size()) - from.offsets[begin];
  to->ids.insert(to->ids.end(), from.ids.begin() + from.offsets[begin],
                 from.ids.begin() + from.offsets[end]);
  to->values.insert(to->values.end(), from.values.begin() + from.offsets[begin],
                    from.values.begin() + from.offsets[end]);
  for (int64_t i = begin; i < end; ++i) to->offsets.push_back(from.offsets[i + 1] + base);
  to->labels.insert(to->labels.end(), from.labels.begin() + begin, from.labels.begin() + end);
  to->size += end - begin;
}

absl::Status CheckSyntheticConfig(const SyntheticLibsvmConfig& config) {
  if (config.rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rows must be >= 0, got ", config.rows));
  }
  if (config.features < 1 || config.features > kMaxSyntheticFeatures) {
    return absl::InvalidArgumentError(absl::StrCat(
        "features must be in [1, ", kMaxSyntheticFeatures, "], got ", config.features));
  }
  const int64_t max_nnz = std::min(config.features, kMaxLibsvmFeatures);
  if (config.nnz < 0 || config.nnz > max_nnz) {
    return absl::InvalidArgumentError(
        absl::StrCat("nnz must be in [0, ", max_nnz, "], got ", config.nnz));
  }
  if (!std::isfinite(config.zipf_s) || config.zipf_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zipf_s must be finite and >= 0, got ", config.zipf_s));
  }
  if (!std::isfinite(config.weight_scale) || config.weight_scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_scale must be finite and >= 0, got ", config.weight_scale));
  }
  if (!(config.density >= 0 && config.density <= 1)) {  // also NaN
    return absl::InvalidArgumentError(
        absl::StrCat("density must be in [0, 1], got ", config.density));
  }
  if (!std::isfinite(config.bias)) {
    return absl::InvalidArgumentError(absl::StrCat("bias must be finite, got ", config.bias));
  }
  return absl::OkStatus();
}

// The hidden ground truth of the generator, derived from the seed alone, and
// the scratch space to draw examples from it. Owned by one call of
// WriteSyntheticLibsvm; not thread-safe.
class HiddenModel {
 public:
  explicit HiddenModel(const SyntheticLibsvmConfig& config)
      : features_(config.features),
        nnz_(config.nnz),
        zipf_cdf_(ZipfCdf(config.features, config.zipf_s)),
        raw_ids_(static_cast<size_t>(config.features)),
        weights_(static_cast<size_t>(config.features)),
        last_use_(static_cast<size_t>(config.features), -1) {
    std::mt19937_64 rng(Mix64(config.seed ^ 0x1b5f0001u));
    // Mix64 is a bijection, so the ids are distinct.
    const uint64_t salt = Mix64(config.seed ^ 0x1b5f0002u);
    for (int64_t k = 0; k < features_; ++k) {
      raw_ids_[k] = Mix64(static_cast<uint64_t>(k) + salt);
      const bool nonzero = Uniform(&rng) < config.density;
      const double w = config.weight_scale * Normal(&rng);
      weights_[k] = nonzero ? w : 0.0;
    }
    // The intercept that makes the mean logit about `bias`.
    std::mt19937_64 pilot(Mix64(config.seed ^ 0x1b5f0003u));
    double sum = 0;
    for (int i = 0; i < kPilotRows; ++i) sum += DrawExample(&pilot);
    intercept_ = config.bias - sum / kPilotRows;
  }

  // Draws one example's ranks and values into ranks() and milli() (value
  // m / 1000, 1000 meaning exactly 1) and returns sum w*x.
  double DrawExample(std::mt19937_64* rng) {
    ++example_;
    ranks_.clear();
    milli_.clear();
    // A repeated rank is drawn again; after this many draws in one example
    // (only for extreme configs: nnz near features with a steep power law)
    // the rest are the most popular unused ranks.
    int64_t budget = 8 * static_cast<int64_t>(nnz_) + 64;
    while (static_cast<int>(ranks_.size()) < nnz_ && budget-- > 0) {
      const int64_t rank = DrawRank(zipf_cdf_, rng);
      if (last_use_[rank] == example_) continue;
      last_use_[rank] = example_;
      ranks_.push_back(rank);
    }
    for (int64_t k = 0; static_cast<int>(ranks_.size()) < nnz_; ++k) {
      if (last_use_[k] == example_) continue;
      last_use_[k] = example_;
      ranks_.push_back(k);
    }
    double sum = 0;
    for (const int64_t rank : ranks_) {
      int m = 1000;
      if (Uniform(rng) < kNonUnitValueRate) {
        m = 1 + static_cast<int>(Uniform(rng) * kMaxMilli);
      }
      milli_.push_back(m);
      sum += weights_[rank] * (m / 1000.0);
    }
    return sum;
  }

  const std::vector<int64_t>& ranks() const { return ranks_; }
  const std::vector<int>& milli() const { return milli_; }
  uint64_t raw_id(int64_t rank) const { return raw_ids_[rank]; }
  double intercept() const { return intercept_; }

 private:
  const int64_t features_;
  const int nnz_;
  std::vector<double> zipf_cdf_;  // [features], last entry 1
  std::vector<uint64_t> raw_ids_;
  std::vector<double> weights_;
  double intercept_ = 0;
  // Scratch of DrawExample: last_use_[rank] == example_ for the ranks the
  // current example has drawn.
  std::vector<int64_t> last_use_;
  int64_t example_ = 0;
  std::vector<int64_t> ranks_;
  std::vector<int> milli_;
};

}  // namespace

int64_t LibsvmFeatureId(uint64_t raw, int64_t buckets) {
  if (buckets > 0) return static_cast<int64_t>(Mix64(raw) % static_cast<uint64_t>(buckets));
  if (raw <= kLow63) return static_cast<int64_t>(raw);
  return static_cast<int64_t>(Mix64(raw) & kLow63);
}

absl::Status ParseLibsvmLine(absl::string_view line, const std::string& path, int64_t line_number,
                             int64_t buckets, LibsvmDataset* data) {
  return ParseLine(line, path, line_number, buckets, data);
}

bool LibsvmLineHasExample(absl::string_view line) {
  // As ParseLine: the text before a '#', if any blank-separated token.
  if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
    line = line.substr(0, hash);
  }
  return std::any_of(line.begin(), line.end(), [](char c) { return !IsBlank(c); });
}

absl::StatusOr<LibsvmDataset> ReadLibsvm(const std::string& path,
                                         const LibsvmFeatureConfig& features, int64_t max_rows) {
  if (max_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_rows must be >= 0, got ", max_rows));
  }
  const int64_t buckets = features.buckets;
  if (buckets < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("buckets must be 0 (hash ids) or positive, got ", buckets));
  }
  errno = 0;
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const int saved = errno;
    return absl::ErrnoToStatus(saved, absl::StrCat("cannot open libsvm file ", path));
  }

  // The file's size, to reserve room for all of it once the first chunk
  // tells how many bytes an example and a feature take (growing the vectors
  // as they fill would copy them over and over, and fault in every copy).
  int64_t file_bytes = -1;
  if (std::fseek(file.get(), 0, SEEK_END) == 0) file_bytes = std::ftell(file.get());
  std::rewind(file.get());

  LibsvmDataset data;
  data.offsets.push_back(0);
  // buffer[begin, end) holds what has been read and not yet parsed.
  size_t capacity = kReadChunk;
  if (file_bytes >= 0 && static_cast<uint64_t>(file_bytes) < kReadChunk) {
    capacity = static_cast<size_t>(file_bytes) + 1;  // + 1: to see the end in one read
  }
  std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(capacity);
  size_t begin = 0;
  size_t end = 0;
  bool eof = false;
  bool reserved = false;
  int64_t parsed_bytes = 0;
  int64_t line_number = 0;
  while (max_rows == 0 || data.size < max_rows) {
    const char* start = buffer.get() + begin;
    const void* newline = std::memchr(start, '\n', end - begin);
    size_t length = 0;
    if (newline != nullptr) {
      length = static_cast<size_t>(static_cast<const char*>(newline) - start);
    } else if (eof) {
      if (begin == end) break;
      length = end - begin;  // the last line has no newline
    } else {
      if (!reserved && parsed_bytes > 0 && file_bytes > parsed_bytes) {
        reserved = true;
        ReserveFor(static_cast<double>(file_bytes) / static_cast<double>(parsed_bytes), max_rows,
                   &data);
      }
      // Keep the partial line at the front, make room, and read more.
      std::memmove(buffer.get(), start, end - begin);
      end -= begin;
      begin = 0;
      if (end == capacity) {
        std::unique_ptr<char[]> bigger = std::make_unique_for_overwrite<char[]>(2 * capacity);
        std::memcpy(bigger.get(), buffer.get(), end);
        buffer = std::move(bigger);
        capacity *= 2;
      }
      const size_t got = std::fread(buffer.get() + end, 1, capacity - end, file.get());
      end += got;
      if (got == 0) {
        if (std::ferror(file.get())) {
          const int saved = errno;
          return absl::DataLossError(absl::StrCat("error reading ", path, " after line ",
                                                  line_number, ": ", ErrnoText(saved)));
        }
        eof = true;
      }
      continue;
    }
    ++line_number;
    PST_RETURN_IF_ERROR(
        ParseLine(absl::string_view(start, length), path, line_number, buckets, &data));
    begin = std::min(begin + length + 1, end);
    parsed_bytes += static_cast<int64_t>(length) + 1;
  }
  return data;
}

void SplitLibsvmHeldOut(LibsvmDataset* data, double fraction, LibsvmDataset* held_out) {
  if (data == nullptr || held_out == nullptr || data == held_out) return;
  if (!(fraction > 0)) fraction = 0;  // also NaN
  if (fraction > 1) fraction = 1;
  // Trust only as many examples as every vector holds.
  int64_t n = std::max<int64_t>(data->size, 0);
  n = std::min<int64_t>(n, static_cast<int64_t>(data->labels.size()));
  n = std::min<int64_t>(n, static_cast<int64_t>(data->offsets.size()) - 1);
  n = std::max<int64_t>(n, 0);
  if (data->offsets.empty()) data->offsets.push_back(0);
  const int64_t held = std::min<int64_t>(n, std::llround(static_cast<double>(n) * fraction));
  const int64_t keep = n - held;

  LibsvmDataset tail;
  AppendExamples(*data, keep, n, &tail);
  *held_out = std::move(tail);
  const int64_t kept_features = data->offsets[keep];
  data->size = keep;
  data->offsets.resize(keep + 1);
  data->ids.resize(kept_features);
  data->values.resize(kept_features);
  data->labels.resize(keep);
}

absl::StatusOr<LibsvmDataset> LoadLibsvmSplit(const proto::TrainingConfig& training,
                                              int64_t buckets, bool held_out, int shard,
                                              int num_shards) {
  if (training.data().empty()) {
    return absl::InvalidArgumentError("the logreg model needs --data=<libsvm file>");
  }
  if (num_shards > 1 && (shard < 0 || shard >= num_shards)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard must be in [0, ", num_shards, "), got ", shard));
  }
  LibsvmFeatureConfig features;
  features.buckets = buckets;
  PST_ASSIGN_OR_RETURN(LibsvmDataset all, ReadLibsvm(training.data(), features));
  LibsvmDataset tail;
  // --eval_data names a held-out set of its own: nothing of --data is.
  if (training.eval_data().empty()) SplitLibsvmHeldOut(&all, training.eval_fraction(), &tail);
  if (held_out) return tail;
  if (num_shards <= 1) return all;
  LibsvmDataset mine;
  mine.offsets.push_back(0);
  for (int64_t i = shard; i < all.size; i += num_shards) AppendExamples(all, i, i + 1, &mine);
  return mine;
}

absl::StatusOr<SyntheticLibsvmStats> WriteSyntheticLibsvm(const std::string& path,
                                                          const SyntheticLibsvmConfig& config) {
  PST_RETURN_IF_ERROR(CheckSyntheticConfig(config));
  HiddenModel model(config);

  errno = 0;
  FilePtr file(std::fopen(path.c_str(), "wb"));
  if (file == nullptr) {
    const int saved = errno;
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(saved)));
  }
  auto flush = [&file, &path](std::string* out) -> absl::Status {
    if (std::fwrite(out->data(), 1, out->size(), file.get()) != out->size()) {
      const int saved = errno;
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(saved)));
    }
    out->clear();
    return absl::OkStatus();
  };

  // Rows draw from their own stream, so the hidden model does not depend on
  // the number of rows.
  std::mt19937_64 rng(Mix64(config.seed ^ 0x1b5f0004u));
  std::vector<float> probs;
  std::vector<float> labels;
  probs.reserve(static_cast<size_t>(config.rows));
  labels.reserve(static_cast<size_t>(config.rows));
  int64_t positives = 0;
  std::string out;
  out.reserve(kWriteChunk + 4096);
  for (int64_t r = 0; r < config.rows; ++r) {
    const double p = Sigmoid(model.intercept() + model.DrawExample(&rng));
    const bool positive = Uniform(&rng) < p;
    positives += positive ? 1 : 0;
    probs.push_back(static_cast<float>(p));
    labels.push_back(positive ? 1.0f : 0.0f);

    out.push_back(positive ? '1' : '0');
    const std::vector<int64_t>& ranks = model.ranks();
    const std::vector<int>& milli = model.milli();
    for (size_t j = 0; j < ranks.size(); ++j) {
      const int m = milli[j];
      if (m == 1000) {
        absl::StrAppend(&out, " ", model.raw_id(ranks[j]), ":1");
      } else {
        absl::StrAppend(&out, " ", model.raw_id(ranks[j]), ":", m / 1000, ".",
                        absl::Dec(m % 1000, absl::kZeroPad3));
      }
    }
    out.push_back('\n');
    if (out.size() >= kWriteChunk) PST_RETURN_IF_ERROR(flush(&out));
  }
  PST_RETURN_IF_ERROR(flush(&out));
  FILE* raw = file.release();
  errno = 0;
  if (std::fclose(raw) != 0) {
    const int saved = errno;
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ErrnoText(saved)));
  }

  SyntheticLibsvmStats stats;
  stats.rows = config.rows;
  stats.positive_rate =
      config.rows > 0 ? static_cast<double>(positives) / static_cast<double>(config.rows) : 0.0;
  stats.best_auc = common::Auc(probs, labels);
  const int64_t tail = std::llround(static_cast<double>(config.rows) * kDefaultEvalFraction);
  const std::vector<float> tail_probs(probs.end() - tail, probs.end());
  const std::vector<float> tail_labels(labels.end() - tail, labels.end());
  stats.best_auc_tail = common::Auc(tail_probs, tail_labels);
  return stats;
}

}  // namespace pst::data
