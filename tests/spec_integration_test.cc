// --model=spec:FILE through the real binaries: `pstrain plan` shows its
// plan, `pstrain local` refuses it without --worker_command, and a bad spec
// stops `pstrain plan` and the chief with a message naming the file and the
// variable.
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"

namespace pst::testing {
namespace {

constexpr char kSpec[] = R"({
  "format": "pstrain.model_spec/1",
  "variables": [
    {"name": "fc.weight", "shape": [10, 4], "kind": "dense", "init": {"kind": "glorot_uniform", "seed": 1}},
    {"name": "emb", "shape": [1000, 8], "kind": "table", "init": {"kind": "normal", "scale": 0.01}}
  ]
})";

class SpecModelIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TestDir(); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }

  struct Result {
    int exit_code = -1;
    std::string output;
  };
  Result Run(const std::string& binary, std::vector<std::string> args,
             std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {BinaryPath(binary)};
    argv.insert(argv.end(), args.begin(), args.end());
    Result result;
    auto process = TestProcess::Start(argv, env);
    EXPECT_TRUE(process.ok());
    if (!process.ok()) return result;
    std::optional<int> exited = (*process)->WaitForExit(absl::Seconds(60));
    EXPECT_TRUE(exited.has_value()) << (*process)->output();
    result.exit_code = exited.has_value() ? ExitCode(*exited) : -1;
    result.output = (*process)->output();
    return result;
  }

  std::string dir_;
};

TEST_F(SpecModelIntegrationTest, Plan_SpecModel_PartitionsItsTable) {
  const std::string spec = Write("model.json", kSpec);
  Result plan = Run("pstrain", {"plan", "--model=spec:" + spec, "--ps=2", "--partitioner=fixed",
                                "--num_shards=2"});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("emb/part_1"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("fc.weight"), std::string::npos) << plan.output;
}

TEST_F(SpecModelIntegrationTest, Local_WithoutWorkerCommand_RefusesWithExit2) {
  const std::string spec = Write("model.json", kSpec);
  Result local = Run("pstrain", {"local", "--model=spec:" + spec, "--ps=1", "--workers=1"});
  EXPECT_EQ(local.exit_code, 2) << local.output;
  EXPECT_NE(local.output.find("--worker_command"), std::string::npos) << local.output;
}

TEST_F(SpecModelIntegrationTest, BadSpec_PlanAndChiefExitNamingFileAndVariable) {
  std::string text = kSpec;
  text.replace(text.find("[1000, 8]"), 9, "[1000, -8]");
  const std::string spec = Write("bad.json", text);
  Result plan = Run("pstrain", {"plan", "--model=spec:" + spec, "--ps=2"});
  EXPECT_NE(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find(spec), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("variable 'emb'"), std::string::npos) << plan.output;

  const LocalSpec cluster = PickLocalSpec(1, 1, 1);
  Result chief =
      Run("chief", {"--model=spec:" + spec}, {"TF_CONFIG=" + TfConfigJson(cluster, "chief", 0)});
  EXPECT_NE(chief.exit_code, 0) << chief.output;
  EXPECT_GT(chief.exit_code, 0) << "killed by a signal: " << chief.output;
  EXPECT_NE(chief.output.find("variable 'emb'"), std::string::npos) << chief.output;

  Result missing = Run("pstrain", {"plan", "--model=spec:" + dir_ + "/none.json", "--ps=2"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("none.json"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace pst::testing
