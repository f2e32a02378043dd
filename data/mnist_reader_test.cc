#include "data/mnist_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pst::data {
namespace {

namespace fs = std::filesystem;

using Bytes = std::vector<uint8_t>;

void AppendBigEndian32(uint32_t v, Bytes* out) {
  out->push_back(static_cast<uint8_t>(v >> 24));
  out->push_back(static_cast<uint8_t>(v >> 16));
  out->push_back(static_cast<uint8_t>(v >> 8));
  out->push_back(static_cast<uint8_t>(v));
}

Bytes ImagesIdx(uint32_t count, uint32_t rows, uint32_t cols, const Bytes& pixels) {
  Bytes out;
  AppendBigEndian32(0x00000803, &out);
  AppendBigEndian32(count, &out);
  AppendBigEndian32(rows, &out);
  AppendBigEndian32(cols, &out);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

Bytes LabelsIdx(const Bytes& labels) {
  Bytes out;
  AppendBigEndian32(0x00000801, &out);
  AppendBigEndian32(static_cast<uint32_t>(labels.size()), &out);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

// Three 2x2 images and their labels.
const Bytes kPixels = {0, 255, 51, 102, 1, 2, 3, 4, 255, 255, 0, 0};
const Bytes kLabels = {7, 0, 9};

class MnistReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = absl::StrCat(::testing::TempDir(), "mnist_reader_test_", getpid(), "_", info->name());
    std::error_code ec;
    fs::remove_all(dir_, ec);
    ASSERT_TRUE(fs::create_directories(dir_, ec)) << dir_ << ": " << ec.message();
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void WritePlain(const std::string& name, const Bytes& bytes) const {
    std::ofstream out(Path(name), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << Path(name);
  }

  void WriteGzip(const std::string& name, const Bytes& bytes) const {
    gzFile file = gzopen(Path(name).c_str(), "wb");
    ASSERT_NE(file, nullptr) << Path(name);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    ASSERT_EQ(gzclose(file), Z_OK);
  }

  // Writes the train split, plain or gzip-compressed.
  void WriteTrain(const Bytes& images, const Bytes& labels, bool gzip) const {
    if (gzip) {
      WriteGzip("train-images-idx3-ubyte.gz", images);
      WriteGzip("train-labels-idx1-ubyte.gz", labels);
    } else {
      WritePlain("train-images-idx3-ubyte", images);
      WritePlain("train-labels-idx1-ubyte", labels);
    }
  }

  // Loads the train split and expects `code` with `path_part` in the message.
  void ExpectTrainError(absl::StatusCode code, const std::string& path_part) const {
    absl::StatusOr<Dataset> data = LoadFashionMnist(dir_, Split::kTrain);
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().code(), code) << data.status();
    EXPECT_TRUE(absl::StrContains(data.status().message(), path_part)) << data.status();
  }

  std::string dir_;
};

void ExpectSmallDataset(const Dataset& data) {
  EXPECT_EQ(data.num_examples, 3);
  EXPECT_EQ(data.dim, 4);
  ASSERT_EQ(data.features.size(), kPixels.size());
  for (size_t i = 0; i < kPixels.size(); ++i) {
    EXPECT_FLOAT_EQ(data.features[i], kPixels[i] / 255.0f) << i;
  }
  EXPECT_EQ(data.features[0], 0.0f);
  EXPECT_EQ(data.features[1], 1.0f);
  EXPECT_FLOAT_EQ(data.features[2], 0.2f);
  EXPECT_EQ(data.labels, (std::vector<int32_t>{7, 0, 9}));
}

TEST_F(MnistReaderTest, LoadsPlainFiles) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/false);
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir_, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data);
}

TEST_F(MnistReaderTest, LoadsGzipFiles) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/true);
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir_, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data);
}

TEST_F(MnistReaderTest, CountReadsTheLabelsHeader) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/true);
  absl::StatusOr<int> count = CountFashionMnist(dir_, Split::kTrain);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 3);
  EXPECT_EQ(CountFashionMnist(dir_, Split::kTest).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(MnistReaderTest, CountOfBadMagicIsDataLoss) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), ImagesIdx(3, 2, 2, kPixels), /*gzip=*/false);
  EXPECT_EQ(CountFashionMnist(dir_, Split::kTrain).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(MnistReaderTest, LoadsTestSplitFromT10kFiles) {
  WriteGzip("t10k-images-idx3-ubyte.gz", ImagesIdx(3, 2, 2, kPixels));
  WritePlain("t10k-labels-idx1-ubyte", LabelsIdx(kLabels));
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir_, Split::kTest);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data);
  // The train split is not there.
  EXPECT_EQ(LoadFashionMnist(dir_, Split::kTrain).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(MnistReaderTest, PrefersUncompressedFile) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/false);
  // A .gz beside it with different contents must be ignored.
  WriteGzip("train-images-idx3-ubyte.gz", ImagesIdx(1, 1, 1, {9}));
  WriteGzip("train-labels-idx1-ubyte.gz", LabelsIdx({1}));
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir_, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data);
}

TEST_F(MnistReaderTest, TruncatedDataIsDataLoss) {
  Bytes images = ImagesIdx(3, 2, 2, kPixels);
  images.pop_back();
  WriteTrain(images, LabelsIdx(kLabels), /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte");
}

TEST_F(MnistReaderTest, TruncatedHeaderIsDataLoss) {
  Bytes labels = LabelsIdx(kLabels);
  labels.resize(6);
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), labels, /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-labels-idx1-ubyte");
}

TEST_F(MnistReaderTest, EmptyFileIsDataLoss) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), {}, /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-labels-idx1-ubyte");
}

TEST_F(MnistReaderTest, TruncatedGzipIsDataLoss) {
  Bytes pixels(3 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7919 % 251);
  WriteTrain(ImagesIdx(3, 28, 28, pixels), LabelsIdx(kLabels), /*gzip=*/true);
  const std::string path = Path("train-images-idx3-ubyte.gz");
  fs::resize_file(path, fs::file_size(path) / 2);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte.gz");
}

TEST_F(MnistReaderTest, GzipMissingTrailerIsDataLoss) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/true);
  // The last 8 bytes of a gzip member are its CRC-32 and length.
  const std::string path = Path("train-labels-idx1-ubyte.gz");
  fs::resize_file(path, fs::file_size(path) - 8);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-labels-idx1-ubyte.gz");
}

TEST_F(MnistReaderTest, GzipBadChecksumIsDataLoss) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/true);
  const std::string path = Path("train-images-idx3-ubyte.gz");
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  file.seekp(static_cast<std::streamoff>(fs::file_size(path)) - 8);
  file.put('\x5a');
  file.close();
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte.gz");
}

TEST_F(MnistReaderTest, TrailingBytesAreDataLoss) {
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    Bytes labels = LabelsIdx(kLabels);
    labels.push_back(3);
    WriteTrain(ImagesIdx(3, 2, 2, kPixels), labels, gzip);
    ExpectTrainError(absl::StatusCode::kDataLoss, "train-labels-idx1-ubyte");
    std::error_code ec;
    fs::remove(Path("train-images-idx3-ubyte"), ec);
    fs::remove(Path("train-labels-idx1-ubyte"), ec);
  }
}

TEST_F(MnistReaderTest, BadMagicIsDataLoss) {
  Bytes images = ImagesIdx(3, 2, 2, kPixels);
  images[3] = 0x01;  // claims to be a labels file
  WriteTrain(images, LabelsIdx(kLabels), /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte");

  WriteTrain(ImagesIdx(3, 2, 2, kPixels), ImagesIdx(3, 1, 1, kLabels), /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-labels-idx1-ubyte");
}

TEST_F(MnistReaderTest, ImplausibleDimensionsAreDataLoss) {
  // Claims 2^31 - 1 images of 28x28: rejected from the header alone.
  WriteTrain(ImagesIdx(0x7fffffff, 28, 28, kPixels), LabelsIdx(kLabels), /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte");
  // A negative count.
  WriteTrain(ImagesIdx(0x80000003, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte");
  // A huge count that still fits in int: fails as truncated, without
  // reserving memory for all it claims.
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx(kLabels), /*gzip=*/false);
  Bytes labels;
  AppendBigEndian32(0x00000801, &labels);
  AppendBigEndian32(2000000000, &labels);
  labels.insert(labels.end(), kLabels.begin(), kLabels.end());
  WritePlain("train-labels-idx1-ubyte", labels);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-labels-idx1-ubyte");
}

TEST_F(MnistReaderTest, CountMismatchIsDataLoss) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx({1, 2}), /*gzip=*/true);
  ExpectTrainError(absl::StatusCode::kDataLoss, "train-images-idx3-ubyte");
}

TEST_F(MnistReaderTest, MissingFileIsNotFound) {
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir_, Split::kTrain);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  const std::string message(data.status().message());
  EXPECT_TRUE(absl::StrContains(message, Path("train-images-idx3-ubyte.gz"))) << message;
  EXPECT_TRUE(absl::StrContains(message, "dataset-fashion-mnist")) << message;
  EXPECT_TRUE(absl::StrContains(message, "--data_dir")) << message;

  // Images present, labels missing.
  WriteGzip("train-images-idx3-ubyte.gz", ImagesIdx(3, 2, 2, kPixels));
  ExpectTrainError(absl::StatusCode::kNotFound, Path("train-labels-idx1-ubyte.gz"));

  EXPECT_EQ(LoadFashionMnist(Path("no_such_dir"), Split::kTest).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(MnistReaderTest, LabelAboveNineIsInvalidArgument) {
  WriteTrain(ImagesIdx(3, 2, 2, kPixels), LabelsIdx({7, 12, 9}), /*gzip=*/false);
  ExpectTrainError(absl::StatusCode::kInvalidArgument, "example 1 is 12");
}

// Ten examples; example i has every feature equal to i and label i % 10.
Dataset TenExamples() {
  Dataset data;
  data.num_examples = 10;
  data.dim = 3;
  for (int i = 0; i < 10; ++i) {
    for (int j = 0; j < data.dim; ++j) data.features.push_back(static_cast<float>(i));
    data.labels.push_back(i);
  }
  return data;
}

TEST(ShardDatasetTest, ShardsAreDisjointAndCover) {
  const Dataset data = TenExamples();
  for (int count : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("count ", count));
    std::set<int32_t> seen;
    int total = 0;
    for (int index = 0; index < count; ++index) {
      const Dataset shard = ShardDataset(data, index, count);
      EXPECT_EQ(shard.dim, data.dim);
      ASSERT_EQ(shard.labels.size(), static_cast<size_t>(shard.num_examples));
      ASSERT_EQ(shard.features.size(), static_cast<size_t>(shard.num_examples * data.dim));
      for (int k = 0; k < shard.num_examples; ++k) {
        const int32_t example = shard.labels[k];
        EXPECT_EQ(example, index + k * count) << "shards keep examples in order";
        EXPECT_EQ(example % count, index);
        for (int j = 0; j < data.dim; ++j) {
          EXPECT_EQ(shard.features[k * data.dim + j], static_cast<float>(example));
        }
        EXPECT_TRUE(seen.insert(example).second) << "example " << example << " in two shards";
      }
      total += shard.num_examples;
    }
    EXPECT_EQ(total, 10);
    EXPECT_EQ(seen.size(), 10u);
  }
}

TEST(ShardDatasetTest, ShardSizes) {
  const Dataset data = TenExamples();
  EXPECT_EQ(ShardDataset(data, 0, 3).num_examples, 4);
  EXPECT_EQ(ShardDataset(data, 1, 3).num_examples, 3);
  EXPECT_EQ(ShardDataset(data, 2, 3).num_examples, 3);
  // More shards than examples: the last ones are empty.
  EXPECT_EQ(ShardDataset(data, 11, 12).num_examples, 0);
}

TEST(ShardDatasetTest, OutOfRangeIndexGivesEmptyShard) {
  const Dataset data = TenExamples();
  for (const auto& [index, count] :
       std::vector<std::array<int, 2>>{{3, 3}, {-1, 2}, {0, 0}, {0, -1}}) {
    const Dataset shard = ShardDataset(data, index, count);
    EXPECT_EQ(shard.num_examples, 0) << index << " of " << count;
    EXPECT_TRUE(shard.features.empty());
    EXPECT_TRUE(shard.labels.empty());
  }
}

TEST(FashionMnistTest, LoadsInstalledDataset) {
  std::error_code ec;
  if (!fs::is_directory(kDefaultFashionMnistDir, ec)) {
    GTEST_SKIP() << kDefaultFashionMnistDir
                 << " does not exist; install Debian's dataset-fashion-mnist package";
  }
  absl::StatusOr<Dataset> train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples, 60000);
  EXPECT_EQ(train->dim, 784);
  EXPECT_EQ(train->features.size(), 60000u * 784u);
  ASSERT_EQ(train->labels.size(), 60000u);
  std::array<int, 10> histogram{};
  for (int32_t label : train->labels) {
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
    ++histogram[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 6000) << "class " << c;
  float max_feature = 0;
  for (float f : train->features) {
    ASSERT_GE(f, 0.0f);
    ASSERT_LE(f, 1.0f);
    max_feature = std::max(max_feature, f);
  }
  EXPECT_EQ(max_feature, 1.0f);

  absl::StatusOr<Dataset> test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, 10000);
  EXPECT_EQ(test->dim, 784);
  EXPECT_EQ(test->features.size(), 10000u * 784u);
  EXPECT_EQ(test->labels.size(), 10000u);
}

}  // namespace
}  // namespace pst::data
