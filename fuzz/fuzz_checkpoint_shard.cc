// libFuzzer target: the checkpoint shard reader. Any file must read as
// records or fail with a status (DataLoss, mostly), never crash or allocate
// without bound; records read must write back and read again the same.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/checkpoint_format.h"
#include "proto/pstrain.pb.h"

namespace {

const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string d = "/tmp/pst_fuzz_shard_" + std::to_string(getpid());
    std::string mkdir = "mkdir -p " + d;
    if (std::system(mkdir.c_str()) != 0) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // quiet about bad UTF-8 in names
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/shard.pst";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  absl::StatusOr<std::vector<pst::common::ShardRecord>> records =
      pst::common::ReadShardFile(path);
  if (!records.ok()) return 0;
  const std::string copy = ScratchDir() + "/copy.pst";
  pst::proto::CheckpointShard shard;
  if (!pst::common::WriteShardFile(copy, *records, &shard).ok()) std::abort();
  absl::StatusOr<std::vector<pst::common::ShardRecord>> again = pst::common::ReadShardFile(copy);
  if (!again.ok() || again->size() != records->size()) std::abort();
  for (size_t i = 0; i < records->size(); ++i) {
    if ((*again)[i].values != (*records)[i].values || (*again)[i].rows != (*records)[i].rows) {
      std::abort();
    }
  }
  return 0;
}
