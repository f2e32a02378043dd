// optimizer_replay: runs a recorded gradient sequence through a ps's store,
// as the ps applies pushes, and writes the values it ends with. The
// reference tests (python/tests/test_optimizers.py) feed the same sequence
// to torch.optim and compare.
//
//   optimizer_replay CONFIG.json
//
// CONFIG: {"optimizer": <OptimizerConfig as proto JSON>, "rows": R,
//   "dim": D, "steps": S, "table": false, "ids_per_step": K,
//   "restore_at": N, "init": PATH, "grads": PATH, "ids": PATH, "out": PATH}
//   init:  R*D float32, the variable's values to start from
//   grads: dense: S*R*D float32; table: S*K*D float32, step s's rows
//   ids:   table only: S*K int64, the rows step s pushes (distinct)
//   out:   written: R*D float32, the values after S steps
// "table": true pushes rows (PushRows on a table of R rows, lazy updates);
// otherwise the whole variable (Push). "restore_at": N > 0 saves the store
// after N steps, restores it into a new store through a shard file, and
// goes on there (as a ps does across a checkpoint restore).
// Exit status 0, or 1 with the error on stderr.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/status_macros.h"
#include "common/tensor_util.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

constexpr const char* kName = "w";

common::Shape Shape2(int64_t rows, int64_t dim) {
  common::Shape shape;
  shape.Add(rows);
  shape.Add(dim);
  return shape;
}

template <typename T>
absl::StatusOr<std::vector<T>> ReadArray(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && !in.good()) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  if (bytes.size() != count * sizeof(T)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds ", bytes.size(), " bytes, not ", count * sizeof(T)));
  }
  std::vector<T> out(count);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

struct Replay {
  proto::OptimizerConfig optimizer;
  int64_t rows = 0, dim = 0, steps = 0, ids_per_step = 0, restore_at = 0;
  bool table = false;
  std::vector<float> init, grads;
  std::vector<int64_t> ids;
  std::string out;  // where the values go
};

proto::CreateVariablesRequest CreateRequest(const Replay& r) {
  proto::CreateVariablesRequest create;
  *create.mutable_optimizer() = r.optimizer;
  proto::VariableSpec* spec = create.add_variables();
  spec->set_name(r.table ? absl::StrCat(kName, "/part_0") : kName);
  spec->set_dtype(proto::DT_FLOAT32);
  spec->add_shape(r.rows);
  spec->add_shape(r.dim);
  spec->mutable_initializer()->set_kind(proto::Initializer::ZEROS);
  if (r.table) {
    spec->set_variable(kName);
    spec->set_partition(0);
    spec->set_num_partitions(1);
    spec->set_routing(proto::MOD);
    spec->add_full_shape(r.rows);
    spec->add_full_shape(r.dim);
    spec->set_row_stride(1);
  }
  create.add_initial_values(r.init.data(), r.init.size() * sizeof(float));
  return create;
}

absl::Status Step(const Replay& r, int64_t s, VariableStore& store) {
  const size_t width = static_cast<size_t>(r.dim);
  if (!r.table) {
    proto::PushRequest push;
    push.set_worker_index(0);
    push.set_step(s);
    push.set_generation(store.generation());
    push.add_names(kName);
    const size_t n = static_cast<size_t>(r.rows) * width;
    common::PackFloats(std::span<const float>(r.grads).subspan(s * n, n), Shape2(r.rows, r.dim),
                       push.add_gradients());
    proto::PushResponse response;
    return store.Push(push, &response);
  }
  proto::PushRowsRequest push;
  push.set_worker_index(0);
  push.set_step(s);
  push.set_generation(store.generation());
  proto::RowIds* rows = push.add_rows();
  rows->set_name(absl::StrCat(kName, "/part_0"));
  const size_t k = static_cast<size_t>(r.ids_per_step);
  for (size_t i = 0; i < k; ++i) rows->add_ids(r.ids[s * k + i]);
  common::PackFloats(std::span<const float>(r.grads).subspan(s * k * width, k * width),
                     Shape2(r.ids_per_step, r.dim), push.add_gradients());
  proto::PushRowsResponse response;
  return store.PushRows(push, &response);
}

absl::StatusOr<Replay> ReadReplay(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError(path + " is not JSON");
  Replay r;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(config.at("optimizer").dump(), &r.optimizer);
  if (!parsed.ok()) return absl::InvalidArgumentError(parsed.ToString());
  r.rows = config.at("rows");
  r.dim = config.at("dim");
  r.steps = config.at("steps");
  r.table = config.value("table", false);
  r.ids_per_step = config.value("ids_per_step", int64_t{0});
  r.restore_at = config.value("restore_at", int64_t{0});
  r.out = config.at("out").get<std::string>();
  const size_t size = static_cast<size_t>(r.rows * r.dim);
  PST_ASSIGN_OR_RETURN(r.init, ReadArray<float>(config.at("init"), size));
  const size_t per_step = r.table ? static_cast<size_t>(r.ids_per_step * r.dim) : size;
  PST_ASSIGN_OR_RETURN(r.grads, ReadArray<float>(config.at("grads"), per_step * r.steps));
  if (r.table) {
    PST_ASSIGN_OR_RETURN(r.ids, ReadArray<int64_t>(config.at("ids"), r.ids_per_step * r.steps));
  }
  return r;
}

absl::Status Run(const std::string& config_path) {
  PST_ASSIGN_OR_RETURN(const Replay r, ReadReplay(config_path));
  const std::string& out_path = r.out;
  auto store = std::make_unique<VariableStore>();
  PST_RETURN_IF_ERROR(store->Create(CreateRequest(r)).status());
  for (int64_t s = 0; s < r.steps; ++s) {
    if (s == r.restore_at && s > 0) {
      // Through a real shard file, into a ps that starts empty.
      const std::string shard = out_path + ".shard";
      PST_RETURN_IF_ERROR(common::WriteShardFile(shard, store->Snapshot(), nullptr));
      PST_ASSIGN_OR_RETURN(const std::vector<common::ShardRecord> records,
                           common::ReadShardFile(shard));
      std::remove(shard.c_str());
      store = std::make_unique<VariableStore>();
      PST_RETURN_IF_ERROR(store->Create(CreateRequest(r)).status());
      std::vector<const common::ShardRecord*> pointers;
      for (const common::ShardRecord& record : records) pointers.push_back(&record);
      PST_RETURN_IF_ERROR(store->Restore(pointers, /*generation=*/1));
    }
    PST_RETURN_IF_ERROR(Step(r, s, *store));
  }
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add(r.table ? absl::StrCat(kName, "/part_0") : kName);
  proto::PullResponse pulled;
  PST_RETURN_IF_ERROR(store->Pull(names, &pulled));
  std::vector<float> values(r.rows * r.dim);
  common::UnpackFloats(pulled.values(0), values);
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", out_path));
  return absl::OkStatus();
}

}  // namespace
}  // namespace pst::ps

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: optimizer_replay CONFIG.json\n";
    return 1;
  }
  const absl::Status status = pst::ps::Run(argv[1]);
  if (!status.ok()) {
    std::cerr << "optimizer_replay: " << status << "\n";
    return 1;
  }
  return 0;
}
