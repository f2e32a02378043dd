// The spec model (--model=spec:FILE; the format is in spec_model.h): its
// parser, the reader of its initial values, and the Model whose variables
// are those of TrainingConfig.spec_variables.
#include "models/spec_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/initializer.h"
#include "common/status_macros.h"
#include "common/table_policy.h"
#include "common/tensor_util.h"
#include "models/model.h"
#include "models/spec_parse.h"
#include "nlohmann/json.hpp"

namespace pst::models {

absl::Status OnlyKeys(const nlohmann::json& object, std::initializer_list<absl::string_view> keys,
                      const SpecContext& context, absl::string_view what) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (absl::string_view k : keys) known = known || key == k;
    if (!known) return context.Error(absl::StrCat("unknown field '", key, "' in ", what));
  }
  return absl::OkStatus();
}

namespace {

using nlohmann::json;
using Context = SpecContext;

constexpr char kPrefix[] = "spec:";

// A JSON integer in [lo, hi], or an error naming `field`.
absl::StatusOr<int64_t> Integer(const json& value, int64_t lo, int64_t hi, const Context& context,
                                absl::string_view field) {
  int64_t v = 0;
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    v = static_cast<int64_t>(value.get<uint64_t>());
  } else if (value.is_number_integer() && !value.is_number_unsigned()) {
    v = value.get<int64_t>();
  } else {
    return context.Error(absl::StrCat("field '", field, "' must be an integer"));
  }
  if (v < lo || v > hi) {
    return context.Error(
        absl::StrCat("field '", field, "' must be in ", lo, "..", hi, ", got ", v));
  }
  return v;
}

absl::Status ParseInit(const json& init, proto::SpecVariable* var, const Context& context) {
  proto::Initializer* out = var->mutable_spec()->mutable_initializer();
  if (init.is_string() && init.get<std::string>() == "file") {
    if (var->kind() == proto::SpecVariable::HASH) {
      return context.Error(
          "a hash embedding has no rows to take from a file; give \"init\" an "
          "object such as {\"kind\": \"uniform\", ...}");
    }
    var->set_from_file(true);
    out->set_kind(proto::Initializer::ZEROS);  // the chief sends the values
    return absl::OkStatus();
  }
  if (!init.is_object()) {
    return context.Error("field 'init' must be \"file\" or an object {\"kind\": ...}");
  }
  PST_RETURN_IF_ERROR(OnlyKeys(init, {"kind", "value", "scale", "seed"}, context, "'init'"));
  auto kind = init.find("kind");
  if (kind == init.end() || !kind->is_string()) {
    return context.Error(
        "field 'init.kind' must be one of zeros, constant, uniform, normal, "
        "glorot_uniform");
  }
  static const std::pair<absl::string_view, proto::Initializer::Kind> kKinds[] = {
      {"zeros", proto::Initializer::ZEROS},
      {"constant", proto::Initializer::CONSTANT},
      {"uniform", proto::Initializer::UNIFORM},
      {"normal", proto::Initializer::NORMAL},
      {"glorot_uniform", proto::Initializer::GLOROT_UNIFORM}};
  const std::string name = kind->get<std::string>();
  bool found = false;
  for (const auto& [text, value] : kKinds) {
    if (name == text) {
      out->set_kind(value);
      found = true;
    }
  }
  if (!found) {
    return context.Error(absl::StrCat("unknown init kind '", name,
                                      "' (known: zeros, constant, uniform, normal, "
                                      "glorot_uniform, or the string \"file\")"));
  }
  for (const char* field : {"value", "scale"}) {
    auto it = init.find(field);
    if (it == init.end()) continue;
    if (!it->is_number()) {
      return context.Error(absl::StrCat("field 'init.", field, "' must be a number"));
    }
    const float v = static_cast<float>(it->get<double>());
    if (absl::string_view(field) == "value") {
      out->set_value(v);
    } else {
      out->set_scale(v);
    }
  }
  if (auto seed = init.find("seed"); seed != init.end()) {
    PST_ASSIGN_OR_RETURN(const int64_t s, Integer(*seed, 0, std::numeric_limits<int64_t>::max(),
                                                  context, "init.seed"));
    out->set_seed(static_cast<uint64_t>(s));
  }
  if (absl::Status valid = common::ValidateInitializer(var->spec()); !valid.ok()) {
    return context.Error(absl::StrCat("field 'init': ", valid.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::SpecVariable> ParseVariable(const json& entry, const Context& context) {
  if (!entry.is_object()) return context.Error("is not a JSON object");
  PST_RETURN_IF_ERROR(OnlyKeys(entry, {"name", "shape", "kind", "init", "dim", "admit_after", "capacity", "eviction"},
                               context, "the variable"));
  proto::SpecVariable var;
  proto::VariableSpec* spec = var.mutable_spec();
  spec->set_dtype(proto::DT_FLOAT32);
  auto name = entry.find("name");
  if (name == entry.end() || !name->is_string() || name->get<std::string>().empty()) {
    return context.Error("field 'name' must be a non-empty string");
  }
  spec->set_name(name->get<std::string>());
  auto kind = entry.find("kind");
  const std::string kind_name =
      kind != entry.end() && kind->is_string() ? kind->get<std::string>() : std::string();
  if (kind_name == "dense") {
    var.set_kind(proto::SpecVariable::DENSE);
  } else if (kind_name == "table") {
    var.set_kind(proto::SpecVariable::TABLE);
  } else if (kind_name == "hash") {
    var.set_kind(proto::SpecVariable::HASH);
  } else {
    return context.Error(
        absl::StrCat("field 'kind' must be dense, table or hash",
                     kind_name.empty() ? "" : absl::StrCat(", got '", kind_name, "'")));
  }
  auto shape = entry.find("shape");
  if (var.kind() == proto::SpecVariable::HASH) {
    if (shape != entry.end()) return context.Error("a hash embedding takes 'dim', not 'shape'");
    auto dim = entry.find("dim");
    if (dim == entry.end())
      return context.Error("field 'dim' is missing (a hash embedding's width)");
    PST_ASSIGN_OR_RETURN(const int64_t d, Integer(*dim, 1, 1 << 20, context, "dim"));
    spec->add_shape(0);
    spec->add_shape(d);
    if (auto admit = entry.find("admit_after"); admit != entry.end()) {
      PST_ASSIGN_OR_RETURN(const int64_t a, Integer(*admit, 0, std::numeric_limits<int32_t>::max(),
                                                    context, "admit_after"));
      spec->set_admit_after(static_cast<int32_t>(a));
    }
    if (auto capacity = entry.find("capacity"); capacity != entry.end()) {
      PST_ASSIGN_OR_RETURN(const int64_t c, Integer(*capacity, 0,
                                                    std::numeric_limits<int64_t>::max(), context,
                                                    "capacity"));
      spec->set_capacity(c);
    }
    if (auto eviction = entry.find("eviction"); eviction != entry.end()) {
      if (!eviction->is_string()) return context.Error("field 'eviction' must be a string");
      spec->set_eviction(eviction->get<std::string>());
    }
    if (spec->capacity() != 0 || !spec->eviction().empty()) {
      absl::Status policy =
          common::ParseTablePolicy(spec->capacity(), spec->eviction(), "capacity/eviction")
              .status();
      if (!policy.ok()) return context.Error(std::string(policy.message()));
    }
  } else {
    for (const char* key : {"dim", "admit_after", "capacity", "eviction"}) {
      if (entry.contains(key)) {
        return context.Error(absl::StrCat("'", key, "' is for hash embeddings only"));
      }
    }
    if (shape == entry.end() || !shape->is_array()) {
      return context.Error("field 'shape' is missing (an array of dims)");
    }
    for (const json& d : *shape) {
      PST_ASSIGN_OR_RETURN(const int64_t dim,
                           Integer(d, 1, std::numeric_limits<int64_t>::max(), context, "shape"));
      spec->add_shape(dim);
    }
    if (var.kind() == proto::SpecVariable::TABLE && spec->shape_size() != 2) {
      return context.Error(
          absl::StrCat("a table needs a shape [rows, dim], got rank ", spec->shape_size()));
    }
    if (!common::NumElements(spec->shape()).ok()) {
      return context.Error(
          absl::StrCat("shape ", common::ShapeString(spec->shape()), " has too many elements"));
    }
  }
  auto init = entry.find("init");
  if (init == entry.end()) return context.Error("field 'init' is missing");
  PST_RETURN_IF_ERROR(ParseInit(*init, &var, context));
  return var;
}

// Checks every "file" variable against the safetensors header.
absl::Status CheckFileTensors(const proto::TrainingConfig& training, const std::string& path) {
  absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(training.spec_initial_values());
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("model spec ", path, ": ", opened.status().message()));
  }
  const SafetensorsFile& file = *opened;
  for (const proto::SpecVariable& var : training.spec_variables()) {
    if (!var.from_file()) continue;
    const std::string& name = var.spec().name();
    const SafetensorsFile::Tensor* tensor = file.Find(name);
    const std::string where = absl::StrCat("model spec ", path, ": variable '", name, "': ");
    if (tensor == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the safetensors file ", file.path(), " has no tensor of that name"));
    }
    if (tensor->dtype != "F32") {
      return absl::InvalidArgumentError(absl::StrCat(where, "tensor in ", file.path(), " is ",
                                                     tensor->dtype, "; only F32 is read"));
    }
    if (!std::equal(tensor->shape.begin(), tensor->shape.end(), var.spec().shape().begin(),
                    var.spec().shape().end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "tensor in ", file.path(), " has shape ",
          common::ShapeString(common::Shape(tensor->shape.begin(), tensor->shape.end())),
          ", the spec says ", common::ShapeString(var.spec().shape())));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseModelSpec(const std::string& path, const std::string& json_text,
                            proto::TrainingConfig* training) {
  Context context(path);
  const json spec = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object()) return context.Error("not a JSON object");
  PST_RETURN_IF_ERROR(OnlyKeys(
      spec, {"format", "initial_values", "variables", "optimizer", "optimizer_groups", "clip_norm"},
      context, "the spec"));
  auto format = spec.find("format");
  if (format == spec.end() || !format->is_string() || *format != kModelSpecFormat) {
    return context.Error(
        absl::StrCat("field 'format' must be \"", kModelSpecFormat, "\"",
                     format == spec.end() ? "" : absl::StrCat(", got ", format->dump())));
  }
  PST_RETURN_IF_ERROR(ParseSpecTraining(spec, context, training));
  training->clear_spec_variables();
  training->clear_spec_initial_values();
  if (auto file = spec.find("initial_values"); file != spec.end()) {
    if (!file->is_string() || file->get<std::string>().empty()) {
      return context.Error("field 'initial_values' must be a file name");
    }
    std::filesystem::path values = file->get<std::string>();
    if (values.is_relative()) values = std::filesystem::path(path).parent_path() / values;
    std::error_code ignored;
    const std::filesystem::path absolute = std::filesystem::absolute(values, ignored);
    training->set_spec_initial_values((absolute.empty() ? values : absolute).string());
  }
  auto variables = spec.find("variables");
  if (variables == spec.end() || !variables->is_array() || variables->empty()) {
    return context.Error("field 'variables' must be a non-empty array");
  }
  absl::flat_hash_set<std::string> names;
  bool any_from_file = false;
  for (size_t i = 0; i < variables->size(); ++i) {
    const json& entry = (*variables)[i];
    const auto name = entry.is_object() ? entry.find("name") : entry.end();
    context.SetVariable(static_cast<int>(i),
                        name != entry.end() && name->is_string() ? name->get<std::string>() : "");
    PST_ASSIGN_OR_RETURN(proto::SpecVariable var, ParseVariable(entry, context));
    if (!names.insert(var.spec().name()).second) return context.Error("the name appears twice");
    if (var.from_file() && training->spec_initial_values().empty()) {
      return context.Error("init \"file\" needs the spec's 'initial_values' file");
    }
    any_from_file = any_from_file || var.from_file();
    *training->add_spec_variables() = std::move(var);
  }
  if (!any_from_file) return absl::OkStatus();
  return CheckFileTensors(*training, path);
}

absl::Status ReadModelSpec(const std::string& path, proto::TrainingConfig* training) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read model spec ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelSpec(path, text.str(), training);
}

SpecInitialValues::SpecInitialValues(SafetensorsFile file, const proto::TrainingConfig& training)
    : file_(std::move(file)) {
  for (const proto::SpecVariable& var : training.spec_variables()) {
    if (!var.from_file()) continue;
    from_file_[var.spec().name()] = var.spec().shape();
  }
}

absl::StatusOr<std::unique_ptr<const SpecInitialValues>> SpecInitialValues::Open(
    const proto::TrainingConfig& training) {
  bool any = false;
  for (const proto::SpecVariable& var : training.spec_variables()) any = any || var.from_file();
  if (!any) return nullptr;
  PST_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(training.spec_initial_values()));
  return std::unique_ptr<const SpecInitialValues>(new SpecInitialValues(std::move(file), training));
}

absl::StatusOr<std::string> SpecInitialValues::ValuesFor(const proto::VariableSpec& entry) const {
  const std::string& name = entry.variable().empty() ? entry.name() : entry.variable();
  auto it = from_file_.find(name);
  if (it == from_file_.end()) return std::string();
  const common::Shape& full = it->second;
  const SafetensorsFile::Tensor* tensor = file_.Find(name);
  if (tensor == nullptr ||
      !std::equal(tensor->shape.begin(), tensor->shape.end(), full.begin(), full.end())) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file ", file_.path(), ": tensor '",
                                                   name, "' no longer has shape ",
                                                   common::ShapeString(full)));
  }
  const int64_t rows = full.empty() ? 1 : full[0];
  if (entry.variable().empty()) {
    PST_ASSIGN_OR_RETURN(const std::vector<float> values, file_.ReadF32Rows(name, 0, rows));
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  // A piece or partition: local row r is global row row_offset + r * row_stride.
  // Read only the span of rows it takes (all of them for a piece).
  PST_ASSIGN_OR_RETURN(const int64_t elements, common::NumElements(full));
  const int64_t dim = rows > 0 ? elements / rows : 0;
  const int64_t local_rows = entry.shape_size() > 0 ? entry.shape(0) : 0;
  const int64_t stride = entry.row_stride();
  const int64_t first = entry.row_offset();
  const int64_t last = first + (local_rows - 1) * stride;
  if (local_rows > 1 && stride < 1) {
    return absl::InvalidArgumentError(absl::StrCat("partition '", entry.name(),
                                                   "' has row stride ", stride));
  }
  for (const int64_t global : {first, last}) {
    if (local_rows > 0 && (global < 0 || global >= rows)) {
      return absl::InvalidArgumentError(absl::StrCat("partition '", entry.name(), "' names row ",
                                                     global, " of '", name, "', which has ", rows));
    }
  }
  std::vector<float> values;
  if (local_rows > 0) {
    PST_ASSIGN_OR_RETURN(values, file_.ReadF32Rows(name, first, last - first + 1));
  }
  std::string out(local_rows * dim * sizeof(float), '\0');
  for (int64_t r = 0; r < local_rows; ++r) {
    const int64_t in_span = r * stride;
    std::memcpy(out.data() + r * dim * sizeof(float), values.data() + in_span * dim,
                dim * sizeof(float));
  }
  return out;
}

namespace {

class SpecModelImpl final : public Model {
 public:
  std::string_view name() const override { return "spec"; }
  bool names_file() const override { return true; }
  bool computed_by_workers() const override { return true; }

  absl::Status ReadFiles(proto::TrainingConfig* training) const override {
    absl::string_view model = training->model();
    if (!absl::ConsumePrefix(&model, kPrefix) || model.empty()) {
      return absl::InvalidArgumentError("--model=spec:FILE needs the spec file's path");
    }
    return ReadModelSpec(std::string(model), training);
  }

  absl::StatusOr<std::vector<ModelVariable>> Variables(
      const proto::TrainingConfig& training) const override {
    if (training.spec_variables().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", training.model(), "' has no variables (its spec file was not read)"));
    }
    std::vector<ModelVariable> vars;
    for (const proto::SpecVariable& var : training.spec_variables()) {
      vars.push_back({var.spec(), var.kind() != proto::SpecVariable::DENSE});
    }
    return vars;
  }

  absl::StatusOr<std::unique_ptr<ModelData>> Load(const proto::TrainingConfig& training,
                                                  const std::string&, bool, int,
                                                  int) const override {
    return NotComputed(training);
  }
  absl::StatusOr<int64_t> Train(const proto::TrainingConfig& training, const ModelData&, uint64_t,
                                client::PsClient*, const LoopControl&) const override {
    return NotComputed(training);
  }
  absl::StatusOr<ModelEvaluation> Evaluate(const proto::TrainingConfig& training, const ModelData&,
                                           client::PsClient*) const override {
    return NotComputed(training);
  }

 private:
  static absl::Status NotComputed(const proto::TrainingConfig& training) {
    return absl::FailedPreconditionError(absl::StrCat("model '", training.model(),
                                                      "' is computed by its workers "
                                                      "(--worker_command), not by pstrain"));
  }
};

}  // namespace

const Model& SpecModel() {
  static const SpecModelImpl model;
  return model;
}

}  // namespace pst::models
