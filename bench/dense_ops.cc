#include "bench/dense_ops.h"

#include <utility>
#include <vector>

#include "bench/plan.h"
#include "bench/ps_bench_options.h"
#include "common/status_macros.h"

namespace pst::bench {

client::Values DenseGradients(int64_t size) {
  return {std::vector<float>(static_cast<size_t>(size), 1e-3f)};
}

absl::StatusOr<std::unique_ptr<client::PsClient>> MakeDenseClient(
    const proto::PlacementPlan& plan, int64_t size, const std::string& wire,
    std::shared_ptr<common::PsTransport> transport, int index, uint64_t incarnation) {
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<client::PsClient> client,
      client::PsClient::Create(plan, {DenseName(size)}, std::move(transport), index, incarnation));
  client->set_wire_dtype(wire == "bf16" ? proto::DT_BFLOAT16 : proto::DT_FLOAT32);
  client->set_topk_ratio(TopKRatio(wire));
  return client;
}

Op MakeDenseOp(const std::string& op, client::PsClient* client, int64_t size, int64_t* step,
               const client::Values* grads, client::Values* out) {
  const double payload = static_cast<double>(size) * sizeof(float);
  if (op == "pull") {
    return [client, out, payload]() -> absl::StatusOr<double> {
      PST_RETURN_IF_ERROR(client->Pull(out).status());
      return payload;
    };
  }
  if (op == "pushpull") {
    return [client, out, step, grads, payload]() -> absl::StatusOr<double> {
      ++*step;
      PST_RETURN_IF_ERROR(client->PushPull(*step, 0, *grads, out).status());
      return 2 * payload;
    };
  }
  return [client, step, grads, payload]() -> absl::StatusOr<double> {
    ++*step;
    PST_RETURN_IF_ERROR(client->Push(*step, 0, *grads).status());
    return payload;
  };
}

}  // namespace pst::bench
