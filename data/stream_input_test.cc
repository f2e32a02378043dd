// stream_input: a model's share with its examples counted, opened at an
// epoch and an example (past the examples before it without parsing them;
// the input here has comment lines, which count in positions but are no
// examples).
#include "data/stream_input.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pst::data {
namespace {

class StreamInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/stream_input_test_", getpid());
    std::filesystem::create_directories(dir_);
    std::ofstream out(dir_ + "/a.svm");
    for (int i = 0; i < 50; ++i) {
      out << (i % 2) << " " << i + 1 << ":1\n";
      if (i % 10 == 0) out << "# a comment: read, but no example\n";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  StreamInput Prepare(int shard = 0, int num_shards = 1, int64_t buffer = 7) {
    StreamOptions options;
    options.buffer_size = buffer;
    options.shuffle = buffer > 1;
    options.seed = 11;
    options.num_epochs = 3;
    absl::StatusOr<StreamInput> input =
        PrepareStreamInput(dir_ + "/a.svm", shard, num_shards, ExampleFormat::kLibsvm, 0, options);
    EXPECT_TRUE(input.ok()) << input.status();
    return input.ok() ? *input : StreamInput();
  }

  std::string dir_;
};

// The ids of `count` examples read from `stream`.
std::vector<int64_t> Ids(LibsvmExampleStream& stream, int64_t count) {
  LibsvmDataset batch;
  absl::StatusOr<int64_t> got = stream.NextBatch(count, &batch);
  EXPECT_TRUE(got.ok()) << got.status();
  return batch.ids;
}

TEST_F(StreamInputTest, Prepare_CountsExamples_NotCommentLines) {
  EXPECT_EQ(Prepare().examples, 50);
  EXPECT_EQ(Prepare(0, 2).examples + Prepare(1, 2).examples, 50);
}

TEST_F(StreamInputTest, OpenAt_EpochAndSkip_ReadsOnAsAStreamFromTheStart) {
  const StreamInput input = Prepare();
  absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> whole = OpenLibsvmAt(input, 0, 0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<int64_t> run = Ids(**whole, 150);  // three epochs
  ASSERT_EQ(run.size(), 150u);
  for (int64_t epoch : {0, 1, 2}) {
    for (int64_t skip : {0, 6, 7, 29, 49, 50}) {
      absl::StatusOr<std::unique_ptr<LibsvmExampleStream>> at = OpenLibsvmAt(input, epoch, skip);
      ASSERT_TRUE(at.ok()) << at.status();
      const int64_t from = epoch * 50 + skip;
      const std::vector<int64_t> rest = Ids(**at, 150 - from);
      EXPECT_EQ(rest, std::vector<int64_t>(run.begin() + from, run.end()))
          << "epoch " << epoch << " skip " << skip;
    }
  }
}

TEST(LibsvmLineHasExampleTest, BlankAndCommentLinesHaveNone) {
  for (const char* none : {"", "  ", "\t\r", "# a comment", "  # 1 3:1"}) {
    EXPECT_FALSE(LibsvmLineHasExample(none)) << "'" << none << "'";
  }
  for (const char* some : {"1 3:1", "0", " -1 7:0.5 # why", "oops"}) {
    EXPECT_TRUE(LibsvmLineHasExample(some)) << "'" << some << "'";
  }
}

TEST_F(StreamInputTest, OpenAt_BadArguments_InvalidArgument) {
  const StreamInput input = Prepare();
  EXPECT_EQ(OpenLibsvmAt(input, 0, 51).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenLibsvmAt(input, -1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenCtrAt(input, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StreamInputTest, Prepare_MissingInput_NotFoundNamingIt) {
  absl::StatusOr<StreamInput> input =
      PrepareStreamInput(dir_ + "/none-*", 0, 1, ExampleFormat::kCriteo, 0, StreamOptions());
  ASSERT_EQ(input.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(input.status().message().find("none-*"), std::string::npos);
}

}  // namespace
}  // namespace pst::data
