// The worker's view of the parameter servers: routes each variable to the
// ps that holds it (per the chief's placement plan) and fans every request
// out to all ps in parallel.
//
// Values are exchanged as one flat float vector per variable, in the order
// of the `names` given at construction.
//
// Thread-compatible: one caller at a time (the training loop). Distinct
// PsClients may be used concurrently.
#ifndef PST_WORKER_PS_CLIENT_H_
#define PST_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/pstrain.grpc.pb.h"

namespace pst::worker {

using Values = std::vector<std::vector<float>>;

class PsClient {
 public:
  // Every name must be in state.plan. Errors: FailedPrecondition if not, or
  // if the plan names a ps index the state has no address for.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(const proto::ClusterState& state,
                                                          const std::vector<std::string>& names,
                                                          int worker_index, uint64_t incarnation,
                                                          absl::Duration rpc_timeout);

  // Fetches every variable into `values` (resized as needed). Returns the
  // smallest version among them: the number of pushes every variable has
  // seen, i.e. the global step in async training.
  absl::StatusOr<int64_t> Pull(Values* values);

  // Pushes `grads` tagged with `step`, then fetches the updated values, in
  // one round trip per ps. Returns the smallest version, as Pull does.
  absl::StatusOr<int64_t> PushPull(int64_t step, const Values& grads, Values* values);

 private:
  struct Shard {
    std::unique_ptr<proto::ParameterServer::Stub> stub;
    std::string address;
    std::vector<int> indices;  // positions in `names_` held by this ps
  };
  PsClient(std::vector<std::string> names, std::vector<std::vector<int64_t>> shapes,
           std::vector<Shard> shards, int worker_index, uint64_t incarnation,
           absl::Duration rpc_timeout);

  // Copies a PullResponse from shard `s` into `values`, checking every name
  // and size against what was asked (the response came over the network).
  absl::Status Unpack(const Shard& shard, const proto::PullResponse& response, Values* values,
                      int64_t* min_version) const;

  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<Shard> shards_;
  const int worker_index_;
  const uint64_t incarnation_;
  const absl::Duration rpc_timeout_;
};

}  // namespace pst::worker

#endif  // PST_WORKER_PS_CLIENT_H_
