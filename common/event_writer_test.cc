// Event files: the CRC-32C against its published check value, the TFRecord
// framing read back, the Event and Summary messages decoded, and damaged
// files reported with the byte where the damage is.
#include "common/event_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/tensorboard.pb.h"

namespace pst::common {
namespace {

std::string FreshDir() {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/event_writer_", getpid(), "_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(Crc32cTest, CheckValueAndMask) {
  // The CRC-32C of "123456789" is 0xE3069283 (the catalogue's check value).
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // Continuing a CRC equals computing it at once.
  EXPECT_EQ(Crc32c("6789", 4, Crc32c("12345", 5)), 0xE3069283u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(MaskedCrc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(EventWriterTest, ScalarsReadBack_WithFileVersionFirst) {
  const std::string dir = FreshDir();
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(absl::StrContains((*writer)->path(), "/events.out.tfevents."));
  const absl::Time t = absl::FromUnixSeconds(1'700'000'000);
  ASSERT_TRUE((*writer)->AddScalars(100, {{"loss", 0.75f}, {"examples_per_sec", 1234.5f}}, t).ok());
  ASSERT_TRUE((*writer)->AddScalars(200, {{"loss", 0.5f}}, t + absl::Seconds(1)).ok());
  ASSERT_TRUE((*writer)->Flush().ok());

  absl::StatusOr<std::vector<std::string>> records = ReadRecords((*writer)->path());
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  tensorboard::Event first, second, third;
  ASSERT_TRUE(first.ParseFromString((*records)[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  ASSERT_TRUE(second.ParseFromString((*records)[1]));
  EXPECT_EQ(second.step(), 100);
  EXPECT_DOUBLE_EQ(second.wall_time(), 1'700'000'000.0);
  ASSERT_EQ(second.summary().value_size(), 2);
  EXPECT_EQ(second.summary().value(0).tag(), "loss");
  EXPECT_FLOAT_EQ(second.summary().value(0).simple_value(), 0.75f);
  EXPECT_EQ(second.summary().value(1).tag(), "examples_per_sec");
  EXPECT_FLOAT_EQ(second.summary().value(1).simple_value(), 1234.5f);
  ASSERT_TRUE(third.ParseFromString((*records)[2]));
  EXPECT_EQ(third.step(), 200);
  EXPECT_FLOAT_EQ(third.summary().value(0).simple_value(), 0.5f);
}

TEST(EventWriterTest, DamagedFiles_DataLossNamingTheOffset) {
  const std::string dir = FreshDir();
  absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalars(1, {{"loss", 1.0f}}).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  std::string bytes;
  {
    std::ifstream in((*writer)->path(), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::vector<std::string> good = *ReadRecords((*writer)->path());
  const size_t second = 12 + good[0].size() + 4;  // where the second record starts
  auto read_damaged = [&](std::string damaged) {
    const std::string path = dir + "/damaged";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    return ReadRecords(path).status();
  };
  std::string flipped = bytes;
  flipped[second + 14] ^= 0x40;  // inside the second record's data
  absl::Status s = read_damaged(flipped);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("data CRC in the record at byte ", second)))
      << s;
  flipped = bytes;
  flipped[second + 1] ^= 0x01;  // the second record's length
  s = read_damaged(flipped);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("length CRC at byte ", second))) << s;
  s = read_damaged(bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated")) << s;
  EXPECT_EQ(ReadRecords(dir + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pst::common
