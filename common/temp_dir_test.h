// A gtest fixture with a directory of its own: <TempDir>/<prefix>-<pid>-
// <test name>, made empty before each test and removed after it, and
// whole-file reads and writes. For the tests of common/ that write files
// (checkpoints, shard files).
#ifndef PST_COMMON_TEMP_DIR_TEST_H_
#define PST_COMMON_TEMP_DIR_TEST_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pst::common {

class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            absl::StrCat(prefix_, "-", getpid(), "-", info->name()))
               .string();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::create_directories(dir_, ec);
    ASSERT_FALSE(ec) << ec.message();
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A whole file's bytes ("" when it cannot be read), and a file made of
  // `bytes`.
  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // `name` in the test's directory.
  std::string Path(const std::string& name) const {
    return (std::filesystem::path(dir_) / name).string();
  }

  std::string dir_;

 private:
  const std::string prefix_;
};

}  // namespace pst::common

#endif  // PST_COMMON_TEMP_DIR_TEST_H_
