// Writes a seed corpus for each fuzz target into <dir>/<target>/: valid
// inputs the fuzzers start from (a TF_CONFIG, a real checkpoint shard, one
// request of each type the ps fuzzer knows).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/checkpoint_format.h"
#include "common/tensor_util.h"
#include "proto/pstrain.pb.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

pst::proto::Tensor Floats(std::vector<float> values, std::vector<int64_t> dims) {
  pst::common::Shape shape;
  for (int64_t d : dims) shape.Add(d);
  pst::proto::Tensor t;
  pst::common::PackFloats(values, shape, &t);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  for (const char* t : {"tf_config", "checkpoint_shard", "ps_request"}) {
    std::filesystem::create_directories(dir + "/" + t);
  }
  Write(dir + "/tf_config/seed",
        R"({"cluster": {"chief": ["h0:2222"], "ps": ["h1:2222", "h2:2222"], )"
        R"("worker": ["h3:2222"]}, "task": {"type": "ps", "index": 1}})");

  std::vector<pst::common::ShardRecord> records(2);
  records[0].spec.set_name("w");
  records[0].spec.set_dtype(pst::proto::DT_FLOAT32);
  records[0].spec.add_shape(2);
  records[0].spec.add_shape(3);
  records[0].version = 7;
  records[0].rows = 2;
  records[0].values = {1, 2, 3, 4, 5, 6};
  records[0].slots = {{0, 0, 0, 0, 0, 0}};
  records[1].spec.set_name("hash");
  records[1].spec.set_dtype(pst::proto::DT_FLOAT32);
  records[1].spec.add_shape(0);
  records[1].spec.add_shape(2);
  records[1].spec.set_routing(pst::proto::HASH);
  records[1].spec.set_variable("hash");
  records[1].spec.set_num_partitions(1);
  records[1].rows = 2;
  records[1].values = {0.5f, -0.5f, 1, -1};
  records[1].hash_ids = {42, 7};
  // A bounded table's extras (format 2): row entries and admission bytes.
  records[1].row_last = {3, 5};
  records[1].row_count = {1.0, 2.5};
  records[1].admission = "PSAF";
  pst::proto::CheckpointShard shard;
  const absl::Status written =
      pst::common::WriteShardFile(dir + "/checkpoint_shard/seed", records, &shard);
  if (!written.ok()) {
    std::fprintf(stderr, "make_seeds: %s\n", written.ToString().c_str());
    return 1;
  }

  pst::proto::PushRequest push;
  push.add_names("w");
  *push.add_gradients() = Floats({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {4, 3});
  push.add_names("b");
  *push.add_gradients() = Floats({1, 2, 3}, {3});
  Write(dir + "/ps_request/push", std::string(1, '\0') + push.SerializeAsString());
  pst::proto::PushPullRequest push_pull;
  *push_pull.mutable_push() = push;
  Write(dir + "/ps_request/pushpull", std::string(1, '\1') + push_pull.SerializeAsString());
  // The same with bf16 gradients and answers, and with top-k entries of w
  // (indices 2 and 7, as little-endian uint32, then their values).
  pst::proto::PushPullRequest half = push_pull;
  half.mutable_push()->set_wire_dtype(pst::proto::DT_BFLOAT16);
  for (pst::proto::Tensor& g : *half.mutable_push()->mutable_gradients()) {
    std::string bf16;
    for (size_t i = 2; i < g.data().size(); i += 4) bf16.append(g.data(), i, 2);
    g.set_dtype(pst::proto::DT_BFLOAT16);
    g.set_data(bf16);
  }
  Write(dir + "/ps_request/pushpull_bf16", std::string(1, '\1') + half.SerializeAsString());
  pst::proto::PushRequest topk = push;
  topk.mutable_gradients(0)->set_dtype(pst::proto::DT_SPARSE_FLOAT32);
  const float entries[4] = {0, 0, 0.5f, -2.0f};
  std::string sparse(reinterpret_cast<const char*>(entries), sizeof(entries));
  sparse[0] = 2;
  sparse[4] = 7;
  topk.mutable_gradients(0)->set_data(sparse);
  Write(dir + "/ps_request/push_topk", std::string(1, '\0') + topk.SerializeAsString());
  pst::proto::PullRequest pull;
  pull.add_names("w");
  Write(dir + "/ps_request/pull", std::string(1, '\2') + pull.SerializeAsString());
  pull.set_wire_dtype(pst::proto::DT_BFLOAT16);
  Write(dir + "/ps_request/pull_bf16", std::string(1, '\2') + pull.SerializeAsString());
  pst::proto::PullRowsRequest rows;
  pst::proto::RowIds* ids = rows.add_rows();
  ids->set_name("emb/part_1");
  ids->add_ids(1);
  ids->add_ids(5);
  pst::proto::RowIds* hash = rows.add_rows();
  hash->set_name("hash");
  hash->add_ids(123456789);
  Write(dir + "/ps_request/pullrows", std::string(1, '\3') + rows.SerializeAsString());
  pst::proto::PushRowsRequest push_rows;
  *push_rows.add_rows() = *ids;
  *push_rows.add_gradients() = Floats({1, 1, 1, 1}, {2, 2});
  Write(dir + "/ps_request/pushrows", std::string(1, '\4') + push_rows.SerializeAsString());
  pst::proto::CreateVariablesRequest create;
  pst::proto::VariableSpec* v = create.add_variables();
  v->set_name("w");
  v->set_dtype(pst::proto::DT_FLOAT32);
  v->add_shape(4);
  v->add_shape(3);
  Write(dir + "/ps_request/create", std::string(1, '\5') + create.SerializeAsString());
  return 0;
}
