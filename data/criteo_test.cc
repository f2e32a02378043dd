#include "data/criteo.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace pst::data {
namespace {

namespace fs = std::filesystem;

// A file under the test temp dir, unique to this process, removed when the
// object goes out of scope.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((fs::path(testing::TempDir()) / absl::StrCat("criteo_test_", getpid(), "_", name))
                  .string()) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A line from a label, 13 integer cells and 26 categorical cells.
std::string Line(const std::string& label, const std::vector<std::string>& ints,
                 const std::vector<std::string>& cats) {
  std::vector<std::string> cols = {label};
  cols.insert(cols.end(), ints.begin(), ints.end());
  cols.insert(cols.end(), cats.begin(), cats.end());
  return absl::StrCat(absl::StrJoin(cols, "\t"), "\n");
}

std::vector<std::string> Ints(const std::string& fill) {
  return std::vector<std::string>(kCriteoDense, fill);
}
std::vector<std::string> Cats(const std::string& fill) {
  return std::vector<std::string>(kCriteoFields, fill);
}

TEST(CriteoTest, FeatureHash_StableAndFieldDependent) {
  EXPECT_EQ(FeatureHash(3, "68fd1e64"), FeatureHash(3, "68fd1e64"));
  EXPECT_NE(FeatureHash(3, "68fd1e64"), FeatureHash(4, "68fd1e64"));
  EXPECT_NE(FeatureHash(3, "68fd1e64"), FeatureHash(3, "68fd1e65"));
  EXPECT_NE(FeatureHash(0, ""), FeatureHash(1, ""));
  // Pinned: a change of the hash would silently remap every id a trained
  // model has learned, so it must fail here.
  EXPECT_EQ(FeatureHash(0, ""), 12440867094808227077ull);
  EXPECT_EQ(FeatureHash(7, "abc"), 15679858165920845900ull);
  EXPECT_EQ(FeatureHash(25, "68fd1e64"), 5271746094841538660ull);
}

TEST(CriteoTest, Read_HandMadeLines) {
  std::vector<std::string> ints = Ints("");
  ints[0] = "0";
  ints[1] = "-5";  // negative -> log1p(0) = 0
  ints[2] = "9";
  ints[12] = "1000";
  std::vector<std::string> cats = Cats("");
  cats[0] = "68fd1e64";
  cats[1] = "68fd1e64";  // the same value in another field
  cats[25] = "a73ee510";
  const std::string line1 = Line("1", ints, cats);
  const std::string line2 = Line("0", Ints("3"), Cats("05db9164"));
  const TempFile path_file("hand.txt");
  const std::string& path = path_file.path();
  WriteFile(path, line1 + line2);

  const int64_t buckets = 1000;
  CtrFeatureConfig bucketed;
  bucketed.buckets_per_field = buckets;
  absl::StatusOr<CtrDataset> data = ReadCriteo(path, bucketed);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size, 2);
  ASSERT_EQ(data->labels, (std::vector<float>{1.0f, 0.0f}));
  ASSERT_EQ(data->dense.size(), 2u * kCriteoDense);
  ASSERT_EQ(data->ids.size(), 2u * kCriteoFields);

  EXPECT_FLOAT_EQ(data->dense[0], 0.0f);
  EXPECT_FLOAT_EQ(data->dense[1], 0.0f);
  EXPECT_FLOAT_EQ(data->dense[2], std::log1p(9.0f));
  EXPECT_FLOAT_EQ(data->dense[3], 0.0f);  // empty
  EXPECT_FLOAT_EQ(data->dense[12], std::log1p(1000.0f));
  for (int j = 0; j < kCriteoDense; ++j) {
    EXPECT_FLOAT_EQ(data->dense[kCriteoDense + j], std::log1p(3.0f));
  }

  for (int r = 0; r < 2; ++r) {
    const std::vector<std::string>& row_cats = r == 0 ? cats : Cats("05db9164");
    for (int f = 0; f < kCriteoFields; ++f) {
      const int64_t id = data->ids[r * kCriteoFields + f];
      EXPECT_GE(id, f * buckets);
      EXPECT_LT(id, (f + 1) * buckets);
      EXPECT_EQ(id, f * buckets + static_cast<int64_t>(FeatureHash(f, row_cats[f]) % buckets))
          << "row " << r << " field " << f;
    }
  }
  // The same value in two fields, and the empty value in two fields, get
  // different ids.
  EXPECT_NE(data->ids[0], data->ids[1]);
  EXPECT_NE(data->ids[2], data->ids[3]);

  absl::StatusOr<CtrDataset> hashed = ReadCriteo(path, CtrFeatureConfig{0});
  ASSERT_TRUE(hashed.ok()) << hashed.status();
  ASSERT_EQ(hashed->ids.size(), 2u * kCriteoFields);
  for (int f = 0; f < kCriteoFields; ++f) {
    const int64_t id = hashed->ids[f];
    EXPECT_GE(id, 0);
    EXPECT_EQ(static_cast<uint64_t>(id), FeatureHash(f, cats[f]) & 0x7fffffffffffffffull);
  }
  EXPECT_NE(hashed->ids[0], hashed->ids[1]);
  EXPECT_EQ(hashed->dense, data->dense);
  EXPECT_EQ(hashed->labels, data->labels);
}

TEST(CriteoTest, Read_CrLfAndNoFinalNewline) {
  std::string line = Line("1", Ints("2"), Cats("ab"));
  line.pop_back();
  const TempFile path_file("crlf.txt");
  const std::string& path = path_file.path();
  std::string crlf = Line("0", Ints("1"), Cats("ab"));
  crlf.insert(crlf.size() - 1, "\r");
  WriteFile(path, crlf + line);
  absl::StatusOr<CtrDataset> data = ReadCriteo(path, CtrFeatureConfig{});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size, 2);
  EXPECT_EQ(data->ids[kCriteoFields - 1], data->ids[2 * kCriteoFields - 1]);
  EXPECT_FLOAT_EQ(data->dense[2 * kCriteoDense - 1], std::log1p(2.0f));
}

TEST(CriteoTest, Read_MaxRows) {
  std::string contents;
  for (int i = 0; i < 5; ++i) contents += Line(i % 2 ? "1" : "0", Ints("1"), Cats("ab"));
  contents += "garbage\n";  // never reached
  const TempFile path_file("max_rows.txt");
  const std::string& path = path_file.path();
  WriteFile(path, contents);
  absl::StatusOr<CtrDataset> data = ReadCriteo(path, CtrFeatureConfig{}, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size, 3);
  EXPECT_EQ(data->labels.size(), 3u);
  EXPECT_FALSE(ReadCriteo(path, CtrFeatureConfig{}).ok());
}

TEST(CriteoTest, Read_MalformedLinesAreInvalidArgumentNamingTheLine) {
  const std::string good = Line("0", Ints("1"), Cats("ab"));
  std::vector<std::string> short_cats = Cats("ab");
  short_cats.pop_back();
  std::vector<std::string> bad_int = Ints("1");
  bad_int[4] = "abc";
  std::vector<std::string> float_int = Ints("1");
  float_int[0] = "1.5";
  struct Case {
    std::string name;
    std::string line;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"39 columns", Line("0", Ints("1"), short_cats), "got 39"},
      {"41 columns", Line("0", Ints("1"), Cats("ab")).insert(0, "x\t"), "got 41"},
      {"label 2", Line("2", Ints("1"), Cats("ab")), "label"},
      {"empty label", Line("", Ints("1"), Cats("ab")), "label"},
      {"integer abc", Line("1", bad_int, Cats("ab")), "I5"},
      {"integer 1.5", Line("1", float_int, Cats("ab")), "I1"},
      {"empty line", "\n", "got 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TempFile path_file("bad.txt");
    const std::string& path = path_file.path();
    WriteFile(path, good + good + c.line + good);
    absl::StatusOr<CtrDataset> data = ReadCriteo(path, CtrFeatureConfig{});
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(data.status().message());
    EXPECT_TRUE(absl::StrContains(message, absl::StrCat(path, ":3:"))) << message;
    EXPECT_TRUE(absl::StrContains(message, c.expected)) << message;
  }
}

TEST(CriteoTest, Read_MissingFileIsNotFound) {
  const TempFile path_file("does_not_exist.txt");
  const std::string& path = path_file.path();
  absl::StatusOr<CtrDataset> data = ReadCriteo(path, CtrFeatureConfig{});
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(data.status().message(), path)) << data.status();
}

TEST(CriteoTest, Read_BadArgumentsAreInvalidArgument) {
  const TempFile path_file("args.txt");
  const std::string& path = path_file.path();
  WriteFile(path, Line("0", Ints("1"), Cats("ab")));
  EXPECT_EQ(ReadCriteo(path, CtrFeatureConfig{-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCriteo(path, CtrFeatureConfig{}, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CriteoTest, SplitHeldOut_TakesTheLastRows) {
  CtrDataset data;
  data.size = 10;
  for (int i = 0; i < 10; ++i) {
    data.labels.push_back(static_cast<float>(i % 2));
    for (int j = 0; j < kCriteoDense; ++j) data.dense.push_back(static_cast<float>(i));
    for (int f = 0; f < kCriteoFields; ++f) data.ids.push_back(i * 100 + f);
  }
  CtrDataset held_out;
  SplitHeldOut(&data, 0.3, &held_out);
  EXPECT_EQ(data.size, 7);
  EXPECT_EQ(held_out.size, 3);
  EXPECT_EQ(data.labels.size(), 7u);
  EXPECT_EQ(data.dense.size(), 7u * kCriteoDense);
  EXPECT_EQ(data.ids.size(), 7u * kCriteoFields);
  ASSERT_EQ(held_out.labels.size(), 3u);
  ASSERT_EQ(held_out.dense.size(), 3u * kCriteoDense);
  ASSERT_EQ(held_out.ids.size(), 3u * kCriteoFields);
  EXPECT_EQ(held_out.dense[0], 7.0f);
  EXPECT_EQ(held_out.ids[0], 700);
  EXPECT_EQ(held_out.ids.back(), 900 + kCriteoFields - 1);
  EXPECT_EQ(data.ids.back(), 600 + kCriteoFields - 1);

  CtrDataset none;
  SplitHeldOut(&data, 0.0, &none);
  EXPECT_EQ(data.size, 7);
  EXPECT_EQ(none.size, 0);
  SplitHeldOut(&data, 1.0, &none);
  EXPECT_EQ(data.size, 0);
  EXPECT_EQ(none.size, 7);
}

SyntheticCriteoConfig SmallConfig(uint64_t seed) {
  SyntheticCriteoConfig config;
  config.rows = 20000;
  config.vocab_per_field = 1000;
  config.seed = seed;
  return config;
}

TEST(CriteoTest, Synthetic_DeterministicGivenSeed) {
  SyntheticCriteoConfig config = SmallConfig(7);
  config.rows = 2000;
  const TempFile a_file("syn_a.txt");
  const std::string& a = a_file.path();
  const TempFile b_file("syn_b.txt");
  const std::string& b = b_file.path();
  const TempFile c_file("syn_c.txt");
  const std::string& c = c_file.path();
  absl::StatusOr<SyntheticCriteoStats> stats_a = WriteSyntheticCriteo(a, config);
  absl::StatusOr<SyntheticCriteoStats> stats_b = WriteSyntheticCriteo(b, config);
  config.seed = 8;
  absl::StatusOr<SyntheticCriteoStats> stats_c = WriteSyntheticCriteo(c, config);
  ASSERT_TRUE(stats_a.ok()) << stats_a.status();
  ASSERT_TRUE(stats_b.ok()) << stats_b.status();
  ASSERT_TRUE(stats_c.ok()) << stats_c.status();
  const std::string bytes_a = ReadFile(a);
  EXPECT_FALSE(bytes_a.empty());
  EXPECT_EQ(bytes_a, ReadFile(b));
  EXPECT_NE(bytes_a, ReadFile(c));
  EXPECT_EQ(stats_a->best_auc, stats_b->best_auc);
  EXPECT_EQ(stats_a->positive_rate, stats_b->positive_rate);
}

TEST(CriteoTest, SyntheticChurn_Zero_KeepsTheFixedVocabularyFile) {
  // An explicit churn of 0 writes what a config that never names it writes.
  SyntheticCriteoConfig config = SmallConfig(5);
  config.rows = 3000;
  const TempFile a_file("churn0_a.txt");
  const TempFile b_file("churn0_b.txt");
  ASSERT_TRUE(WriteSyntheticCriteo(a_file.path(), config).ok());
  config.churn = 0.0;
  absl::StatusOr<SyntheticCriteoStats> stats = WriteSyntheticCriteo(b_file.path(), config);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(ReadFile(a_file.path()), ReadFile(b_file.path()));
  EXPECT_LE(stats->distinct_values, kCriteoFields * config.vocab_per_field);
}

TEST(CriteoTest, SyntheticChurn_Nine_ManyMoreValuesOverTheFileThanAtAnyMoment) {
  SyntheticCriteoConfig config;
  config.rows = 40000;
  config.vocab_per_field = 200;
  config.seed = 3;
  config.churn = 9;
  const TempFile path_file("churn9.txt");
  absl::StatusOr<SyntheticCriteoStats> stats = WriteSyntheticCriteo(path_file.path(), config);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // Labels still follow a hidden model that values predict.
  EXPECT_GT(stats->positive_rate, 0.15);
  EXPECT_LT(stats->positive_rate, 0.5);
  EXPECT_GT(stats->best_auc, 0.6);

  absl::StatusOr<CtrDataset> data = ReadCriteo(path_file.path(), CtrFeatureConfig{0});
  ASSERT_TRUE(data.ok()) << data.status();
  // Field 0 over the whole file against field 0 within one tenth of it.
  absl::flat_hash_set<int64_t> all;
  size_t window_max = 0;
  const int64_t window = config.rows / 10;
  for (int64_t start = 0; start < data->size; start += window) {
    absl::flat_hash_set<int64_t> in_window;
    for (int64_t r = start; r < std::min(data->size, start + window); ++r) {
      in_window.insert(data->ids[r * kCriteoFields]);
      all.insert(data->ids[r * kCriteoFields]);
    }
    window_max = std::max(window_max, in_window.size());
  }
  EXPECT_GT(all.size(), 6 * static_cast<size_t>(config.vocab_per_field));
  EXPECT_GT(all.size(), 3 * window_max);
  EXPECT_GT(stats->distinct_values, 6 * kCriteoFields * config.vocab_per_field);

  // The same seed and churn write the same file.
  const TempFile again_file("churn9_again.txt");
  ASSERT_TRUE(WriteSyntheticCriteo(again_file.path(), config).ok());
  EXPECT_EQ(ReadFile(path_file.path()), ReadFile(again_file.path()));
}

TEST(CriteoTest, SyntheticChurn_Negative_IsInvalidArgument) {
  SyntheticCriteoConfig config = SmallConfig(1);
  config.churn = -1;
  const TempFile path_file("churn_bad.txt");
  EXPECT_EQ(WriteSyntheticCriteo(path_file.path(), config).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CriteoTest, Synthetic_StatsAndPowerLaw) {
  const SyntheticCriteoConfig config = SmallConfig(1);
  const TempFile path_file("syn_stats.txt");
  const std::string& path = path_file.path();
  absl::StatusOr<SyntheticCriteoStats> stats = WriteSyntheticCriteo(path, config);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows, config.rows);
  EXPECT_GT(stats->positive_rate, 0.15);
  EXPECT_LT(stats->positive_rate, 0.45);
  EXPECT_GT(stats->best_auc, 0.6);
  EXPECT_LT(stats->best_auc, 1.0);

  // Hash ids are one to one with raw values (up to 63-bit collisions).
  absl::StatusOr<CtrDataset> data = ReadCriteo(path, CtrFeatureConfig{0});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size, config.rows);
  double positives = 0;
  for (float y : data->labels) positives += y;
  EXPECT_DOUBLE_EQ(positives / static_cast<double>(config.rows), stats->positive_rate);

  absl::flat_hash_map<int64_t, int> counts;
  for (int64_t r = 0; r < data->size; ++r) ++counts[data->ids[r * kCriteoFields]];
  std::vector<int> sorted;
  for (const auto& [id, count] : counts) sorted.push_back(count);
  std::sort(sorted.begin(), sorted.end());
  const int most = sorted.back();
  const int median = sorted[sorted.size() / 2];
  EXPECT_GT(sorted.size(), 300u);  // many distinct values, not a handful
  EXPECT_GT(most, 20 * median) << "most " << most << ", median " << median;

  // Some integer and categorical cells are left empty.
  const std::string bytes = ReadFile(path);
  EXPECT_TRUE(absl::StrContains(bytes, "\t\t"));

  absl::StatusOr<CtrDataset> first = ReadCriteo(path, CtrFeatureConfig{}, 123);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size, 123);
  EXPECT_EQ(first->ids.size(), 123u * kCriteoFields);
  for (int64_t id : first->ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, kCriteoFields * CtrFeatureConfig{}.buckets_per_field);
  }
}

TEST(CriteoTest, Synthetic_UnwritablePathIsInternal) {
  const TempFile path_file("no_such_dir/x/data.txt");
  const std::string& path = path_file.path();
  absl::StatusOr<SyntheticCriteoStats> stats = WriteSyntheticCriteo(path, SmallConfig(1));
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(stats.status().message(), path)) << stats.status();
}

TEST(CriteoTest, Synthetic_BadConfigIsInvalidArgument) {
  const TempFile path_file("bad_config.txt");
  const std::string& path = path_file.path();
  SyntheticCriteoConfig config = SmallConfig(1);
  config.vocab_per_field = 0;
  EXPECT_EQ(WriteSyntheticCriteo(path, config).status().code(), absl::StatusCode::kInvalidArgument);
  config = SmallConfig(1);
  config.rows = -1;
  EXPECT_EQ(WriteSyntheticCriteo(path, config).status().code(), absl::StatusCode::kInvalidArgument);
  config = SmallConfig(1);
  config.weight_scale = std::nan("");
  EXPECT_EQ(WriteSyntheticCriteo(path, config).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::data
