#include "models/spec_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "models/model_spec.h"
#include "models/registry.h"
#include "models/safetensors_test_util.h"

namespace pst::models {
namespace {

using safetensors_testing::Iota;
using safetensors_testing::WriteSafetensors;

// The example of spec_model.h.
constexpr char kSpec[] = R"({
  "format": "pstrain.model_spec/1",
  "initial_values": "cnn.safetensors",
  "variables": [
    {"name": "conv1.weight", "shape": [16, 1, 3, 3], "kind": "dense", "init": "file"},
    {"name": "fc.bias", "shape": [10], "kind": "dense", "init": {"kind": "zeros"}},
    {"name": "emb", "shape": [1000, 8], "kind": "table",
     "init": {"kind": "normal", "scale": 0.01, "seed": 7}},
    {"name": "hashemb", "kind": "hash", "dim": 8, "admit_after": 2,
     "init": {"kind": "uniform", "scale": 0.05, "seed": 3}}
  ]
})";

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

class SpecModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/spec_model_test_", getpid());
    std::filesystem::create_directories(dir_);
    WriteSafetensors(dir_ + "/cnn.safetensors",
                     {{"conv1.weight", {16, 1, 3, 3}, Iota(144)}, {"other", {2}, Iota(2)}});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteSpec(const std::string& text, const std::string& name = "model.json") {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // ReadModelSpec of `text` fails with `code`, naming the file and `part`.
  void ExpectError(const std::string& text, const std::string& part,
                   absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    const std::string path = WriteSpec(text);
    proto::TrainingConfig training;
    absl::Status status = ReadModelSpec(path, &training);
    ASSERT_FALSE(status.ok()) << "accepted: " << text;
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_NE(status.message().find(path), std::string::npos) << status;
    EXPECT_NE(status.message().find(part), std::string::npos) << status;
  }
  // kSpec with `from` replaced by `to`.
  static std::string Edited(const std::string& from, const std::string& to) {
    std::string text = kSpec;
    EXPECT_NE(text.find(from), std::string::npos) << from;
    return absl::StrReplaceAll(text, {{from, to}});
  }

  std::string dir_;
};

TEST_F(SpecModelTest, ReadModelSpec_Example_ParsesEveryVariable) {
  proto::TrainingConfig training;
  ASSERT_TRUE(ReadModelSpec(WriteSpec(kSpec), &training).ok());
  EXPECT_EQ(training.spec_initial_values(),
            std::filesystem::absolute(dir_ + "/cnn.safetensors").string());
  ASSERT_EQ(training.spec_variables_size(), 4);
  const proto::SpecVariable& conv = training.spec_variables(0);
  EXPECT_EQ(conv.spec().name(), "conv1.weight");
  EXPECT_EQ(conv.kind(), proto::SpecVariable::DENSE);
  EXPECT_TRUE(conv.from_file());
  EXPECT_EQ(conv.spec().shape_size(), 4);
  EXPECT_EQ(conv.spec().dtype(), proto::DT_FLOAT32);
  const proto::SpecVariable& emb = training.spec_variables(2);
  EXPECT_EQ(emb.kind(), proto::SpecVariable::TABLE);
  EXPECT_FALSE(emb.from_file());
  EXPECT_EQ(emb.spec().initializer().kind(), proto::Initializer::NORMAL);
  EXPECT_FLOAT_EQ(emb.spec().initializer().scale(), 0.01f);
  EXPECT_EQ(emb.spec().initializer().seed(), 7u);
  const proto::SpecVariable& hash = training.spec_variables(3);
  EXPECT_EQ(hash.kind(), proto::SpecVariable::HASH);
  EXPECT_EQ(hash.spec().shape(0), 0);
  EXPECT_EQ(hash.spec().shape(1), 8);
  EXPECT_EQ(hash.spec().admit_after(), 2);
  EXPECT_EQ(hash.spec().initializer().kind(), proto::Initializer::UNIFORM);
}

TEST_F(SpecModelTest, ReadModelSpec_MissingFile_IsNotFound) {
  proto::TrainingConfig training;
  EXPECT_EQ(ReadModelSpec(dir_ + "/none.json", &training).code(), absl::StatusCode::kNotFound);
}

TEST_F(SpecModelTest, ReadModelSpec_BadSpecs_NameTheFileAndTheProblem) {
  ExpectError("[1]", "not a JSON object");
  ExpectError(Edited("pstrain.model_spec/1", "pstrain.model_spec/2"), "format");
  ExpectError(Edited("\"fc.bias\"", "\"conv1.weight\""), "appears twice");
  ExpectError(Edited(R"("shape": [10], )", ""), "variable 'fc.bias': field 'shape'");
  ExpectError(Edited("[10]", "[-10]"), "variable 'fc.bias': field 'shape'");
  ExpectError(Edited("[1000, 8]", "[1000, 8, 2]"), "variable 'emb': a table needs");
  ExpectError(Edited(R"("kind": "table")", R"("kind": "sparse")"), "variable 'emb': field 'kind'");
  ExpectError(Edited(R"("kind": "normal")", R"("kind": "xavier")"),
              "variable 'emb': unknown init kind 'xavier'");
  ExpectError(Edited(R"("scale": 0.01)", R"("scale": -1)"), "variable 'emb': field 'init'");
  ExpectError(Edited(R"(, "seed": 7)", R"(, "sede": 7)"), "unknown field 'sede'");
  ExpectError(Edited(R"("dim": 8, )", ""), "variable 'hashemb': field 'dim'");
  ExpectError(Edited(R"("init": {"kind": "zeros"})", R"("init": "ones")"),
              "variable 'fc.bias': field 'init'");
  ExpectError(Edited(R"("initial_values": "cnn.safetensors",)", ""),
              "variable 'conv1.weight': init \"file\" needs");
  ExpectError(Edited(R"("variables": [)", R"("variables": [], "x": [)"), "unknown field 'x'");
}

TEST_F(SpecModelTest, ReadModelSpec_OptimizerAndClipNorm_AreTheJobs) {
  const std::string with = Edited(R"("initial_values")", R"("optimizer": {"name": "adadelta",
      "form": "torch", "learning_rate": 1.0, "rho": 0.9, "schedule": "step:1,gamma:0.7,every:5"},
      "clip_norm": 0.5, "initial_values")");
  proto::TrainingConfig training;
  ASSERT_TRUE(ReadModelSpec(WriteSpec(with), &training).ok());
  EXPECT_EQ(training.optimizer().name(), "adadelta");
  EXPECT_EQ(training.optimizer().form(), "torch");
  EXPECT_EQ(training.optimizer().learning_rate(), 1.0f);
  EXPECT_EQ(training.optimizer().rho(), 0.9f);
  EXPECT_EQ(training.optimizer().schedule().kind(), "step");
  EXPECT_EQ(training.optimizer().schedule().every(), 5);
  EXPECT_EQ(training.optimizer().schedule().gamma(), 0.7f);
  EXPECT_EQ(training.clip_norm(), 0.5f);
  // The schedule as an object, in protobuf's JSON form.
  proto::TrainingConfig object;
  ASSERT_TRUE(ReadModelSpec(WriteSpec(Edited(R"("initial_values")",
                                             R"("optimizer": {"name": "adam", "learning_rate":
      0.01, "schedule": {"kind": "cosine", "decay_units": 100}}, "initial_values")")),
                            &object)
                  .ok());
  EXPECT_EQ(object.optimizer().schedule().decay_units(), 100);
  // A spec without them leaves none.
  proto::TrainingConfig none;
  ASSERT_TRUE(ReadModelSpec(WriteSpec(kSpec), &none).ok());
  EXPECT_FALSE(none.has_optimizer());
  EXPECT_EQ(none.clip_norm(), 0.0f);
}

TEST_F(SpecModelTest, ReadModelSpec_BadOptimizer_NamesTheField) {
  ExpectError(Edited(R"("initial_values")", R"("optimizer": "adam", "initial_values")"),
              "field 'optimizer' must be an object");
  ExpectError(Edited(R"("initial_values")",
                     R"("optimizer": {"name": "adam", "betaa": 0.9}, "initial_values")"),
              "betaa");
  ExpectError(Edited(R"("initial_values")",
                     R"("optimizer": {"name": "adam", "schedule": "cosine:0"}, "initial_values")"),
              "optimizer: lr_schedule: cosine needs decay units");
  ExpectError(Edited(R"("initial_values")", R"("clip_norm": -1, "initial_values")"),
              "field 'clip_norm' must be a number >= 0");
}

TEST_F(SpecModelTest, ReadModelSpec_HashFromFile_IsRefused) {
  ExpectError(
      Edited(R"("init": {"kind": "uniform", "scale": 0.05, "seed": 3})", R"("init": "file")"),
      "variable 'hashemb': a hash embedding has no rows");
}

TEST_F(SpecModelTest, ReadModelSpec_FileTensorProblems_NameTheVariable) {
  ExpectError(Edited("conv1.weight", "conv2.weight"), "variable 'conv2.weight'");
  ExpectError(Edited("[16, 1, 3, 3]", "[16, 9]"), "has shape [16, 1, 3, 3], the spec says [16, 9]");
  ExpectError(Edited("cnn.safetensors", "none.safetensors"), "none.safetensors",
              absl::StatusCode::kNotFound);
  safetensors_testing::WriteRaw(dir_ + "/bad.safetensors", 16, "{}", "");  // length past the end
  ExpectError(Edited("cnn.safetensors", "bad.safetensors"), "bad.safetensors: its header length");
  const std::string f16 =
      R"({"conv1.weight": {"dtype": "F16", "shape": [16, 1, 3, 3], "data_offsets": [0, 288]}})";
  safetensors_testing::WriteRaw(dir_ + "/f16.safetensors", f16.size(), f16, std::string(288, 0));
  ExpectError(Edited("cnn.safetensors", "f16.safetensors"), "is F16");
}

TEST_F(SpecModelTest, Registry_SpecPrefix_FindsTheSpecModel) {
  proto::TrainingConfig training;
  training.set_model("spec:" + WriteSpec(kSpec));
  absl::StatusOr<const Model*> model = ModelFor(training);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->computed_by_workers());
  EXPECT_FALSE(FindModel("spec").ok());
  EXPECT_FALSE((*FindModel("mlp"))->computed_by_workers());
  // Before the file is read, it has no variables.
  EXPECT_EQ((*model)->Variables(training).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*model)->ReadFiles(&training).ok());
  absl::StatusOr<std::vector<ModelVariable>> vars = ModelVariables(training);
  ASSERT_TRUE(vars.ok()) << vars.status();
  ASSERT_EQ(vars->size(), 4u);
  EXPECT_FALSE((*vars)[0].table);
  EXPECT_FALSE((*vars)[1].table);
  EXPECT_TRUE((*vars)[2].table);
  EXPECT_TRUE((*vars)[3].table);
  EXPECT_EQ(DenseNames(*vars), (std::vector<std::string>{"conv1.weight", "fc.bias"}));
}

TEST_F(SpecModelTest, LoadTrainEvaluate_FailPrecondition_NamingTheWorkers) {
  proto::TrainingConfig training;
  training.set_model("spec:x.json");
  const Model& model = **ModelFor(training);
  absl::Status load = model.Load(training, "", false, 0, 1).status();
  EXPECT_EQ(load.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(load.message().find("--worker_command"), std::string::npos) << load;
}

TEST_F(SpecModelTest, BuildPlan_TableOverTwoPs_PartitionsItAndListsDenseAndTables) {
  proto::TrainingConfig training;
  training.set_model("spec:" + WriteSpec(kSpec));
  ASSERT_TRUE((*ModelFor(training))->ReadFiles(&training).ok());
  training.mutable_partitioner()->set_kind("fixed");
  training.mutable_partitioner()->set_num_shards(2);
  training.set_routing(proto::MOD);
  absl::StatusOr<proto::PlacementPlan> plan = BuildPlan(training, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(std::vector<std::string>(plan->dense().begin(), plan->dense().end()),
            (std::vector<std::string>{"conv1.weight", "fc.bias"}));
  EXPECT_EQ(std::vector<std::string>(plan->tables().begin(), plan->tables().end()),
            (std::vector<std::string>{"emb", "hashemb"}));
  std::map<std::string, const proto::PlacementPlan::Entry*> entries;
  for (const auto& entry : plan->variables()) entries[entry.spec().name()] = &entry;
  ASSERT_TRUE(entries.contains("emb/part_0") && entries.contains("emb/part_1"));
  EXPECT_EQ(entries["emb/part_0"]->spec().shape(0), 500);
  EXPECT_EQ(entries["emb/part_0"]->spec().routing(), proto::MOD);
  EXPECT_NE(entries["emb/part_0"]->ps_index(), entries["emb/part_1"]->ps_index());
  EXPECT_EQ(entries["hashemb/part_0"]->spec().routing(), proto::HASH);
  EXPECT_EQ(entries["hashemb/part_0"]->spec().admit_after(), 2);
  EXPECT_TRUE(CheckPlanMatches(*plan, *ModelVariables(training)).ok());
}

TEST_F(SpecModelTest, ValuesFor_WholePieceAndPartition_SliceTheFileRows) {
  WriteSafetensors(dir_ + "/cnn.safetensors",
                   {{"conv1.weight", {16, 1, 3, 3}, Iota(144)}, {"t", {5, 2}, Iota(10, 1, 100)}});
  proto::TrainingConfig training;
  ASSERT_TRUE(ReadModelSpec(WriteSpec(absl::StrReplaceAll(
                                Edited(R"("init": {"kind": "normal", "scale": 0.01, "seed": 7})",
                                       R"("init": "file")"),
                                {{R"("emb", "shape": [1000, 8])", R"("t", "shape": [5, 2])"}})),
                            &training)
                  .ok());
  absl::StatusOr<std::unique_ptr<const SpecInitialValues>> values =
      SpecInitialValues::Open(training);
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_NE(*values, nullptr);
  proto::VariableSpec whole;
  whole.set_name("conv1.weight");
  EXPECT_EQ(Floats(*(*values)->ValuesFor(whole)), Iota(144));
  proto::VariableSpec zeros;
  zeros.set_name("fc.bias");
  EXPECT_EQ(*(*values)->ValuesFor(zeros), "");
  // 'mod' partition 1 of 2 of t: global rows 1 and 3.
  proto::VariableSpec part;
  part.set_name("t/part_1");
  part.set_variable("t");
  part.add_shape(2);
  part.add_shape(2);
  part.set_row_offset(1);
  part.set_row_stride(2);
  EXPECT_EQ(Floats(*(*values)->ValuesFor(part)), (std::vector<float>{102, 103, 106, 107}));
  // A 'div' piece of conv1.weight: rows 4..5.
  proto::VariableSpec piece;
  piece.set_name("conv1.weight/part_1");
  piece.set_variable("conv1.weight");
  for (int64_t d : {2, 1, 3, 3}) piece.add_shape(d);
  piece.set_row_offset(4);
  piece.set_row_stride(1);
  const std::vector<float> all = Iota(144);
  EXPECT_EQ(Floats(*(*values)->ValuesFor(piece)),
            std::vector<float>(all.begin() + 36, all.begin() + 54));
}

TEST_F(SpecModelTest, SpecInitialValues_NoFileVariables_IsNull) {
  proto::TrainingConfig training;
  ASSERT_TRUE(ReadModelSpec(WriteSpec(Edited(R"("init": "file")", R"("init": {"kind": "zeros"})")),
                            &training)
                  .ok());
  absl::StatusOr<std::unique_ptr<const SpecInitialValues>> values =
      SpecInitialValues::Open(training);
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(*values, nullptr);
}

}  // namespace
}  // namespace pst::models
