#include "worker/ps_client.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/tensor_util.h"

namespace pst::worker {
namespace {

// Issues one call per shard with `start(i, context, done)` and waits for all.
// Returns the first error, annotated with the ps address.
template <typename Start>
absl::Status FanOut(size_t n, absl::Duration timeout, const std::vector<std::string>& addresses,
                    Start&& start) {
  std::vector<grpc::ClientContext> contexts(n);
  std::vector<grpc::Status> statuses(n);
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    common::SetDeadline(&contexts[i], timeout);
    start(i, &contexts[i], [&statuses, &pending, i](grpc::Status status) {
      statuses[i] = std::move(status);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      absl::Status s = common::FromGrpcStatus(statuses[i]);
      return absl::Status(s.code(), absl::StrCat("ps at ", addresses[i], ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(const proto::ClusterState& state,
                                                           const std::vector<std::string>& names,
                                                           int worker_index, uint64_t incarnation,
                                                           absl::Duration rpc_timeout) {
  absl::flat_hash_map<std::string, const proto::PlacementPlan::Entry*> plan;
  for (const auto& entry : state.plan().variables()) plan[entry.spec().name()] = &entry;
  std::vector<Shard> shards(state.ps_addresses_size());
  for (int p = 0; p < state.ps_addresses_size(); ++p) {
    shards[p].address = state.ps_addresses(p);
    shards[p].stub = proto::ParameterServer::NewStub(common::MakeChannel(shards[p].address));
  }
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = plan.find(names[i]);
    if (it == plan.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable '", names[i], "' is not in the placement plan"));
    }
    const int ps = it->second->ps_index();
    if (ps < 0 || ps >= static_cast<int>(shards.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable '", names[i], "' is placed on ps ", ps, " but the cluster has ",
                       shards.size(), " ps"));
    }
    shards[ps].indices.push_back(static_cast<int>(i));
    const auto& shape = it->second->spec().shape();
    shapes.emplace_back(shape.begin(), shape.end());
  }
  // Only ps that hold something take part in requests.
  std::erase_if(shards, [](const Shard& s) { return s.indices.empty(); });
  return std::unique_ptr<PsClient>(new PsClient(names, std::move(shapes), std::move(shards),
                                                worker_index, incarnation, rpc_timeout));
}

PsClient::PsClient(std::vector<std::string> names, std::vector<std::vector<int64_t>> shapes,
                   std::vector<Shard> shards, int worker_index, uint64_t incarnation,
                   absl::Duration rpc_timeout)
    : names_(std::move(names)),
      shapes_(std::move(shapes)),
      shards_(std::move(shards)),
      worker_index_(worker_index),
      incarnation_(incarnation),
      rpc_timeout_(rpc_timeout) {}

absl::Status PsClient::Unpack(const Shard& shard, const proto::PullResponse& response,
                              Values* values, int64_t* min_version) const {
  if (response.names_size() != static_cast<int>(shard.indices.size()) ||
      response.values_size() != response.names_size() ||
      response.versions_size() != response.names_size()) {
    return absl::DataLossError(absl::StrCat("ps at ", shard.address, " answered with ",
                                            response.names_size(), " variables, asked for ",
                                            shard.indices.size()));
  }
  for (size_t k = 0; k < shard.indices.size(); ++k) {
    const int i = shard.indices[k];
    if (response.names(k) != names_[i]) {
      return absl::DataLossError(absl::StrCat("ps at ", shard.address, " answered '",
                                              response.names(k), "' for '", names_[i], "'"));
    }
    google::protobuf::RepeatedField<int64_t> shape(shapes_[i].begin(), shapes_[i].end());
    absl::Status ok = common::CheckTensorMatches(response.values(k), shape,
                                                 absl::StrCat("value of '", names_[i], "'"));
    if (!ok.ok()) return absl::DataLossError(ok.message());
    std::vector<float>& out = (*values)[i];
    out.resize(response.values(k).data().size() / sizeof(float));
    common::UnpackFloats(response.values(k), out);
    *min_version = std::min(*min_version, response.versions(k));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsClient::Pull(Values* values) {
  values->resize(names_.size());
  std::vector<proto::PullRequest> requests(shards_.size());
  std::vector<proto::PullResponse> responses(shards_.size());
  std::vector<std::string> addresses;
  for (size_t s = 0; s < shards_.size(); ++s) {
    addresses.push_back(shards_[s].address);
    for (int i : shards_[s].indices) requests[s].add_names(names_[i]);
  }
  absl::Status status = FanOut(
      shards_.size(), rpc_timeout_, addresses, [&](size_t s, grpc::ClientContext* ctx, auto done) {
        shards_[s].stub->async()->Pull(ctx, &requests[s], &responses[s], std::move(done));
      });
  if (!status.ok()) return status;
  int64_t min_version = std::numeric_limits<int64_t>::max();
  for (size_t s = 0; s < shards_.size(); ++s) {
    absl::Status ok = Unpack(shards_[s], responses[s], values, &min_version);
    if (!ok.ok()) return ok;
  }
  return shards_.empty() ? 0 : min_version;
}

absl::StatusOr<int64_t> PsClient::PushPull(int64_t step, const Values& grads, Values* values) {
  if (grads.size() != names_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of ", grads.size(), " gradients for ", names_.size(), " variables"));
  }
  values->resize(names_.size());
  std::vector<proto::PushPullRequest> requests(shards_.size());
  std::vector<proto::PullResponse> responses(shards_.size());
  std::vector<std::string> addresses;
  for (size_t s = 0; s < shards_.size(); ++s) {
    addresses.push_back(shards_[s].address);
    proto::PushRequest* push = requests[s].mutable_push();
    push->set_worker_index(worker_index_);
    push->set_incarnation(incarnation_);
    push->set_step(step);
    for (int i : shards_[s].indices) {
      push->add_names(names_[i]);
      google::protobuf::RepeatedField<int64_t> shape(shapes_[i].begin(), shapes_[i].end());
      if (static_cast<int64_t>(grads[i].size()) != *common::NumElements(shape)) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for '", names_[i], "' has ",
                                                       grads[i].size(), " values, expected ",
                                                       *common::NumElements(shape)));
      }
      common::PackFloats(grads[i], shape, push->add_gradients());
    }
  }
  absl::Status status = FanOut(
      shards_.size(), rpc_timeout_, addresses, [&](size_t s, grpc::ClientContext* ctx, auto done) {
        shards_[s].stub->async()->PushPull(ctx, &requests[s], &responses[s], std::move(done));
      });
  if (!status.ok()) return status;
  int64_t min_version = std::numeric_limits<int64_t>::max();
  for (size_t s = 0; s < shards_.size(); ++s) {
    absl::Status ok = Unpack(shards_[s], responses[s], values, &min_version);
    if (!ok.ok()) return ok;
  }
  return shards_.empty() ? 0 : min_version;
}

}  // namespace pst::worker
