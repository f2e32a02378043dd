#include "models/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "models/safetensors_test_util.h"

namespace pst::models {
namespace {

using safetensors_testing::Encode;
using safetensors_testing::F32Tensor;
using safetensors_testing::Iota;
using safetensors_testing::WriteRaw;
using safetensors_testing::WriteSafetensors;

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/safetensors_test_", getpid());
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/t.safetensors";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Opening the file fails InvalidArgument with a message naming the file
  // and holding `part`.
  void ExpectCorrupt(const std::string& part) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    EXPECT_NE(file.status().message().find(path_), std::string::npos) << file.status();
    EXPECT_NE(file.status().message().find(part), std::string::npos) << file.status();
  }

  std::string dir_;
  std::string path_;
};

TEST_F(SafetensorsFileTest, Open_WellFormed_ReadsEveryTensor) {
  WriteSafetensors(path_, {{"a", {2, 3}, Iota(6)}, {"b.bias", {4}, Iota(4, -1.0f, 7)}});
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Names(), (std::vector<std::string>{"a", "b.bias"}));
  ASSERT_NE(file->Find("a"), nullptr);
  EXPECT_EQ(file->Find("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file->Find("a")->dtype, "F32");
  EXPECT_EQ(file->Find("missing"), nullptr);
  EXPECT_EQ(*file->ReadF32("a"), Iota(6));
  EXPECT_EQ(*file->ReadF32("b.bias"), Iota(4, -1.0f, 7));
  EXPECT_EQ(file->ReadF32("missing").status().code(), absl::StatusCode::kNotFound);
}

// A piece of a variable reads only its rows.
TEST_F(SafetensorsFileTest, ReadF32Rows_ReadsThoseRows_AndRefusesRowsOutside) {
  WriteSafetensors(path_, {{"b.bias", {4}, Iota(4, -1.0f, 7)}, {"a", {4, 3}, Iota(12)}});
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<float> all = Iota(12);
  EXPECT_EQ(*file->ReadF32Rows("a", 1, 2), std::vector<float>(all.begin() + 3, all.begin() + 9));
  EXPECT_EQ(*file->ReadF32Rows("a", 3, 1), std::vector<float>(all.begin() + 9, all.end()));
  EXPECT_TRUE(file->ReadF32Rows("a", 4, 0)->empty());
  EXPECT_EQ(*file->ReadF32Rows("b.bias", 2, 2), (std::vector<float>{5, 4}));
  EXPECT_EQ(file->ReadF32Rows("a", 3, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file->ReadF32Rows("a", -1, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file->ReadF32Rows("a", 0, -1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file->ReadF32Rows("missing", 0, 1).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsFileTest, Open_MissingFile_IsNotFound) {
  EXPECT_EQ(SafetensorsFile::Open(dir_ + "/nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsFileTest, Open_ShorterThanTheLength_IsInvalid) {
  std::ofstream(path_, std::ios::binary) << "abc";
  ExpectCorrupt("8 bytes");
}

TEST_F(SafetensorsFileTest, Open_HeaderLengthPastTheFile_IsInvalid) {
  auto [header, data] = Encode({{"a", {2}, Iota(2)}});
  WriteRaw(path_, 1ull << 40, header, data);
  ExpectCorrupt("runs past the end");
  WriteRaw(path_, ~0ull, header, data);  // would wrap in a signed sum
  ExpectCorrupt("runs past the end");
}

TEST_F(SafetensorsFileTest, Open_HeaderNotJson_IsInvalid) {
  WriteRaw(path_, 5, "{\"a\":", "");
  ExpectCorrupt("not a JSON object");
  WriteRaw(path_, 2, "[]", "");
  ExpectCorrupt("not a JSON object");
}

TEST_F(SafetensorsFileTest, Open_EntryWithoutFields_IsInvalid) {
  const std::string not_object = R"({"a": 1})";
  WriteRaw(path_, not_object.size(), not_object, "");
  ExpectCorrupt("'a' is not a JSON object");
  const std::string no_dtype = R"({"a": {"shape": [1], "data_offsets": [0, 4]}})";
  WriteRaw(path_, no_dtype.size(), no_dtype, "abcd");
  ExpectCorrupt("dtype");
  const std::string bad_shape = R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})";
  WriteRaw(path_, bad_shape.size(), bad_shape, "abcd");
  ExpectCorrupt("shape");
  const std::string no_offsets = R"({"a": {"dtype": "F32", "shape": [1]}})";
  WriteRaw(path_, no_offsets.size(), no_offsets, "abcd");
  ExpectCorrupt("data_offsets");
}

TEST_F(SafetensorsFileTest, Open_OffsetsOutOfRange_IsInvalid) {
  const std::string past = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  WriteRaw(path_, past.size(), past, "abcd");  // 4 bytes of data, 8 claimed
  ExpectCorrupt("out of range");
  const std::string reversed = R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})";
  WriteRaw(path_, reversed.size(), reversed, "abcd");
  ExpectCorrupt("out of range");
  const std::string negative = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})";
  WriteRaw(path_, negative.size(), negative, "abcd");
  ExpectCorrupt("out of range");
}

TEST_F(SafetensorsFileTest, Open_SizeNotShapeTimesElement_IsInvalid) {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})";
  WriteRaw(path_, header.size(), header, std::string(8, '\0'));
  ExpectCorrupt("holds 8 bytes");
}

TEST_F(SafetensorsFileTest, Open_OverlappingTensors_IsInvalid) {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                             R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  WriteRaw(path_, header.size(), header, std::string(12, '\0'));
  ExpectCorrupt("overlap");
}

TEST_F(SafetensorsFileTest, ReadF32_OtherDtype_IsInvalid) {
  const std::string header = R"({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})";
  WriteRaw(path_, header.size(), header, std::string(4, '\0'));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<float>> values = file->ReadF32("a");
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("F16"), std::string::npos);
}

TEST_F(SafetensorsFileTest, ReadF32_FileTruncatedAfterOpen_IsInvalid) {
  WriteSafetensors(path_, {{"a", {4}, Iota(4)}});
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) - 2);
  EXPECT_EQ(file->ReadF32("a").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::models
